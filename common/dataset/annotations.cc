#include "common/dataset/annotations.h"

#include <set>

#include "common/format.h"
#include "common/limits.h"

namespace mlcd {

const Attribute* DatasetAnnotations::FindAttribute(const std::string& name) const {
  for (const Attribute& a : attributes) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string DatasetAnnotations::Describe() const {
  if (empty()) return "none";
  std::string out;
  if (!labels.empty()) {
    const int64_t n = labels.num_samples();
    out = std::to_string(labels.num_labels) + " labels";
    if (n > 0) {
      out += " (" + Fixed(static_cast<double>(labels.ids.size()) / static_cast<double>(n), 2) +
             " per sample)";
    }
  }
  if (!attributes.empty()) {
    if (!out.empty()) out += "; ";
    out += "attributes";
    for (size_t a = 0; a < attributes.size(); ++a) {
      out += (a == 0 ? " " : ", ") + attributes[a].name + " (" +
             std::to_string(attributes[a].num_classes) + ")";
    }
  }
  return out;
}

DatasetAnnotations DatasetAnnotations::Prefix(int64_t n) const {
  DatasetAnnotations out;
  out.labels.num_labels = labels.num_labels;
  out.labels.names = labels.names;
  if (!labels.empty()) {
    out.labels.offsets.assign(labels.offsets.begin(), labels.offsets.begin() + n + 1);
    out.labels.ids.assign(labels.ids.begin(), labels.ids.begin() + labels.offsets[n]);
  }
  for (const Attribute& a : attributes) {
    Attribute b;
    b.name = a.name;
    b.num_classes = a.num_classes;
    b.class_names = a.class_names;
    b.values.assign(a.values.begin(), a.values.begin() + n);
    out.attributes.push_back(std::move(b));
  }
  return out;
}

Status DatasetAnnotations::Check(int64_t num_samples) const {
  if (labels.num_labels < 0 || labels.num_labels > kMaxDatasetLabels) {
    return Status::InvalidArgument("annotations: " + std::to_string(labels.num_labels) +
                                   " labels, outside [0, " + std::to_string(kMaxDatasetLabels) +
                                   "]");
  }
  if (!labels.names.empty() && labels.names.size() != static_cast<size_t>(labels.num_labels)) {
    return Status::InvalidArgument("annotations: " + std::to_string(labels.names.size()) +
                                   " label names for " + std::to_string(labels.num_labels) +
                                   " labels");
  }
  if (labels.empty()) {
    if (!labels.offsets.empty() || !labels.ids.empty()) {
      return Status::InvalidArgument("annotations: label sets given without a label count");
    }
  } else {
    if (labels.num_samples() != num_samples || labels.offsets[0] != 0 ||
        labels.offsets.back() != static_cast<int64_t>(labels.ids.size())) {
      return Status::InvalidArgument("annotations: label set offsets do not cover " +
                                     std::to_string(num_samples) + " samples and " +
                                     std::to_string(labels.ids.size()) + " label ids");
    }
    for (int64_t i = 0; i < num_samples; ++i) {
      if (labels.offsets[i + 1] < labels.offsets[i]) {
        return Status::InvalidArgument("annotations: label set offsets decrease at sample " +
                                       std::to_string(i));
      }
      for (int64_t k = labels.offsets[i]; k < labels.offsets[i + 1]; ++k) {
        const int32_t id = labels.ids[static_cast<size_t>(k)];
        if (id < 0 || id >= labels.num_labels ||
            (k > labels.offsets[i] && id <= labels.ids[static_cast<size_t>(k) - 1])) {
          return Status::InvalidArgument("annotations: sample " + std::to_string(i) +
                                         " has label " + std::to_string(id) +
                                         ": label ids must be distinct, ascending and in [0, " +
                                         std::to_string(labels.num_labels) + ")");
        }
      }
    }
  }
  if (attributes.size() > static_cast<size_t>(kMaxDatasetAttributes)) {
    return Status::InvalidArgument("annotations: " + std::to_string(attributes.size()) +
                                   " attributes, more than " +
                                   std::to_string(kMaxDatasetAttributes));
  }
  std::set<std::string> names;
  for (const Attribute& a : attributes) {
    if (!IsValidAttributeName(a.name)) {
      return Status::InvalidArgument("annotations: attribute name '" + EscapeControlChars(a.name) +
                                     "' is not [a-z0-9_]+ of at most " +
                                     std::to_string(kMaxAttributeNameLength) + " characters");
    }
    if (!names.insert(a.name).second) {
      return Status::InvalidArgument("annotations: attribute '" + a.name + "' is listed twice");
    }
    if (a.num_classes < 1 || a.num_classes > kMaxAttributeClasses) {
      return Status::InvalidArgument("annotations: attribute '" + a.name + "' has " +
                                     std::to_string(a.num_classes) + " classes, outside [1, " +
                                     std::to_string(kMaxAttributeClasses) + "]");
    }
    if (!a.class_names.empty() && a.class_names.size() != static_cast<size_t>(a.num_classes)) {
      return Status::InvalidArgument("annotations: attribute '" + a.name + "' has " +
                                     std::to_string(a.class_names.size()) + " class names for " +
                                     std::to_string(a.num_classes) + " classes");
    }
    if (a.values.size() != static_cast<size_t>(num_samples)) {
      return Status::InvalidArgument("annotations: attribute '" + a.name + "' has " +
                                     std::to_string(a.values.size()) + " values for " +
                                     std::to_string(num_samples) + " samples");
    }
    for (size_t i = 0; i < a.values.size(); ++i) {
      if (a.values[i] < 0 || a.values[i] >= a.num_classes) {
        return Status::InvalidArgument(
            "annotations: sample " + std::to_string(i) + " has attribute " + a.name + " = " +
            std::to_string(a.values[i]) + ", outside [0, " + std::to_string(a.num_classes) + ")");
      }
    }
  }
  return Status::Ok();
}

bool IsValidAttributeName(const std::string& name) {
  if (name.empty() || name.size() > kMaxAttributeNameLength) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace mlcd
