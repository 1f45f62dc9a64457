// Per-sample annotations of a dataset beyond its single class (docs/data.md, "Annotations"):
// multi-label sets (each sample's distinct label ids out of L labels) and named attributes
// (each a class id out of its own count, e.g. shape / texture / colour). Evaluation reads them
// to score multi-label metrics and one probe per attribute. WebDataset shards carry them as
// `<key>.labels` and `<key>.<attribute>.cls` members declared by an `annotations.json` beside
// the shards; the dataset index stores them (common/dataset/dataset_index.h) and the worker's
// ImageDataset::annotations() hands them out. Empty (no labels, no attributes) by default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd {

// Sample i's label set is ids[offsets[i], offsets[i + 1]): distinct, ascending, each in
// [0, num_labels). An empty set is allowed (an image with no label).
struct LabelSets {
  // L; 0 = the dataset has no label sets (offsets and ids are then empty).
  int32_t num_labels = 0;
  // Label names, label j on entry j; num_labels entries or none.
  std::vector<std::string> names;
  // num_samples + 1 entries when num_labels > 0 (offsets[0] = 0, non-decreasing).
  std::vector<int64_t> offsets;
  std::vector<int32_t> ids;

  bool empty() const { return num_labels == 0; }
  int64_t num_samples() const {
    return offsets.empty() ? 0 : static_cast<int64_t>(offsets.size()) - 1;
  }
  // The number of labels of sample i and a pointer to the first (i in [0, num_samples())).
  int64_t count(int64_t i) const { return offsets[i + 1] - offsets[i]; }
  const int32_t* begin(int64_t i) const { return ids.data() + offsets[i]; }
};

// One named attribute: every sample's value is a class id in [0, num_classes).
struct Attribute {
  // [a-z0-9_]+, at most kMaxAttributeNameLength characters ("shape", "colour").
  std::string name;
  int32_t num_classes = 0;
  // Class names, class c on entry c; num_classes entries or none.
  std::vector<std::string> class_names;
  // values[i] is sample i's class.
  std::vector<int32_t> values;
};

struct DatasetAnnotations {
  LabelSets labels;
  // In the order annotations.json lists them; names unique.
  std::vector<Attribute> attributes;

  bool empty() const { return labels.empty() && attributes.empty(); }
  // The attribute called `name`, or null.
  const Attribute* FindAttribute(const std::string& name) const;
  // "10 labels (2.7 per sample); attributes shape (10), texture (10), colour (10)", or "none".
  std::string Describe() const;
  // The annotations of samples [0, n) only (a dataset opened with a limit); n <= the count.
  DatasetAnnotations Prefix(int64_t n) const;
  // INVALID_ARGUMENT naming the problem when the annotations of `num_samples` samples are not
  // consistent (sizes, ranges, sorted distinct label ids, unique attribute names).
  Status Check(int64_t num_samples) const;
};

// Whether `name` is a valid attribute name ([a-z0-9_]+, 1..kMaxAttributeNameLength).
bool IsValidAttributeName(const std::string& name);

}  // namespace mlcd
