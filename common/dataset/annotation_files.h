// The files and members that carry dataset annotations (common/dataset/annotations.h;
// docs/data.md, "Annotations"):
// - `annotations.json`, beside the shards (in the directory of the first shard) and in the
//   dataset index, declares them:
//     {"labels": {"count": 10, "names": ["t-shirt", ...]},
//      "attributes": [{"name": "shape", "count": 10, "names": ["triangle", ...]}, ...]}
//   Both keys are optional, "names" too. Unknown keys are refused (a misspelt key would
//   silently drop annotations).
// - WebDataset members of a sample, read when annotations.json declares them:
//     <key>.labels        its label ids as decimal text separated by spaces, commas or
//                         newlines ("3 7", "3,7"; empty = no label); repeated ids count once
//     <key>.<name>.cls    attribute <name>'s class as decimal text ("4")
//   Every sample must carry every declared member; undeclared ones are ignored as other
//   members are.
// - `annotations.bin` in the dataset index: the per-sample values, little-endian: the label
//   sets' n + 1 offsets (u64) then their ids (i32), then for each attribute in order its n
//   values (i32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dataset/annotations.h"
#include "common/status.h"

namespace mlcd {

inline constexpr char kAnnotationsJson[] = "annotations.json";
inline constexpr char kAnnotationsBin[] = "annotations.bin";
// The largest .labels member read (kMaxLabelsPerSample ids of up to 8 characters).
constexpr int64_t kMaxLabelsMemberBytes = 16384;

// Parses annotations.json into annotations with their declarations only (no sample).
// INVALID_ARGUMENT naming `where` and the field for bad JSON, an unknown key, a count out of
// range, a names list of the wrong length, a bad or repeated attribute name.
StatusOr<DatasetAnnotations> ParseAnnotationsJson(const std::string& text,
                                                  const std::string& where);
// The annotations.json of `annotations`' declarations (the per-sample values are not in it).
std::string AnnotationsJson(const DatasetAnnotations& annotations);

// annotations.bin of `annotations` (checked consistent with its sample count).
std::string EncodeAnnotationValues(const DatasetAnnotations& annotations);
// Fills the per-sample values of `annotations` (declarations from ParseAnnotationsJson) for
// `num_samples` samples from annotations.bin `bytes`. DATA_LOSS naming `where` when the size or
// a value is wrong.
Status DecodeAnnotationValues(const std::string& bytes, int64_t num_samples,
                              const std::string& where, DatasetAnnotations* annotations);

// Collects the annotation members of the samples of WebDataset shards, one sample at a time,
// into the per-sample values of the declared annotations.
class AnnotationMembers {
 public:
  // `declared` comes from ParseAnnotationsJson and must outlive this.
  explicit AnnotationMembers(const DatasetAnnotations* declared);

  // Whether a member with (lower-case) extension `extension` is an annotation member.
  bool Wants(const std::string& extension) const;
  // The member's largest size in bytes.
  int64_t MaxBytes(const std::string& extension) const;
  // Reads one member of the current sample. INVALID_ARGUMENT naming `where` (shard and
  // member) for a member given twice, text that is not numbers, an id out of range.
  Status Add(const std::string& extension, const std::string& data, const std::string& where);
  // Ends the current sample: with `keep`, appends its values to `out` (which has the
  // declarations) and INVALID_ARGUMENT naming `where` when a declared member is missing.
  Status Finish(bool keep, const std::string& where, DatasetAnnotations* out);

 private:
  const DatasetAnnotations* declared_;
  bool has_labels_ = false;
  std::vector<int32_t> labels_;
  std::vector<int32_t> values_;  // per attribute, -1 = not seen yet
};

}  // namespace mlcd
