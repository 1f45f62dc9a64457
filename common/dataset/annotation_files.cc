#include "common/dataset/annotation_files.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/dataset/little_endian.h"
#include "common/format.h"
#include "common/limits.h"

namespace mlcd {
namespace {

constexpr int64_t kMaxAttributeMemberBytes = 64;

// {"count": n, "names": [...]} of the labels or one attribute; `field` names it in errors.
Status ParseCountAndNames(const nlohmann::json& j, const std::string& field, int64_t max_count,
                          const std::set<std::string>& allowed, int32_t* count,
                          std::vector<std::string>* names) {
  if (!j.is_object()) return Status::InvalidArgument(field + " must be an object");
  for (const auto& [k, v] : j.items()) {
    if (!allowed.count(k)) {
      return Status::InvalidArgument(field + " has the unknown key '" + EscapeControlChars(k) +
                                     "'");
    }
  }
  if (!j.contains("count") || !j["count"].is_number_integer() || j["count"].get<int64_t>() < 1 ||
      j["count"].get<int64_t>() > max_count) {
    return Status::InvalidArgument(field + ".count must be an integer in [1, " +
                                   std::to_string(max_count) + "]");
  }
  *count = static_cast<int32_t>(j["count"].get<int64_t>());
  if (!j.contains("names")) return Status::Ok();
  const nlohmann::json& n = j["names"];
  if (!n.is_array() || n.size() != static_cast<size_t>(*count) ||
      !std::all_of(n.begin(), n.end(), [](const nlohmann::json& s) { return s.is_string(); })) {
    return Status::InvalidArgument(field + ".names must be a list of " + std::to_string(*count) +
                                   " strings (one per class)");
  }
  for (const auto& s : n) names->push_back(s.get<std::string>());
  return Status::Ok();
}

// Parses decimal text; false when it is not a number in [0, 2^31).
bool ParseId(const std::string& text, int32_t* id) {
  if (text.empty() || text.size() > 10) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) return false;
  *id = static_cast<int32_t>(v);
  return true;
}

}  // namespace

StatusOr<DatasetAnnotations> ParseAnnotationsJson(const std::string& text,
                                                  const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(where + " is not a JSON object");
  }
  DatasetAnnotations out;
  for (const auto& [k, v] : j.items()) {
    if (k != "labels" && k != "attributes") {
      return Status::InvalidArgument(where + " has the unknown key '" + EscapeControlChars(k) +
                                     "' (it may hold \"labels\" and \"attributes\")");
    }
  }
  if (j.contains("labels")) {
    MLCD_RETURN_IF_ERROR(ParseCountAndNames(j["labels"], where + ": labels", kMaxDatasetLabels,
                                            {"count", "names"}, &out.labels.num_labels,
                                            &out.labels.names));
  }
  if (j.contains("attributes")) {
    const nlohmann::json& attrs = j["attributes"];
    if (!attrs.is_array() || attrs.size() > static_cast<size_t>(kMaxDatasetAttributes)) {
      return Status::InvalidArgument(where + ": attributes must be a list of at most " +
                                     std::to_string(kMaxDatasetAttributes) + " objects");
    }
    std::set<std::string> seen;
    for (size_t a = 0; a < attrs.size(); ++a) {
      const std::string field = where + ": attributes[" + std::to_string(a) + "]";
      Attribute attr;
      MLCD_RETURN_IF_ERROR(ParseCountAndNames(attrs[a], field, kMaxAttributeClasses,
                                              {"name", "count", "names"}, &attr.num_classes,
                                              &attr.class_names));
      if (!attrs[a].contains("name") || !attrs[a]["name"].is_string() ||
          !IsValidAttributeName(attrs[a]["name"].get<std::string>())) {
        return Status::InvalidArgument(field + ".name must be [a-z0-9_]+ of at most " +
                                       std::to_string(kMaxAttributeNameLength) + " characters");
      }
      attr.name = attrs[a]["name"].get<std::string>();
      if (!seen.insert(attr.name).second) {
        return Status::InvalidArgument(field + ".name '" + attr.name + "' is listed twice");
      }
      out.attributes.push_back(std::move(attr));
    }
  }
  if (!out.labels.empty()) out.labels.offsets.push_back(0);
  return out;
}

std::string AnnotationsJson(const DatasetAnnotations& annotations) {
  nlohmann::json j = nlohmann::json::object();
  if (!annotations.labels.empty()) {
    j["labels"] = {{"count", annotations.labels.num_labels}};
    if (!annotations.labels.names.empty()) j["labels"]["names"] = annotations.labels.names;
  }
  if (!annotations.attributes.empty()) {
    j["attributes"] = nlohmann::json::array();
    for (const Attribute& a : annotations.attributes) {
      nlohmann::json e = {{"name", a.name}, {"count", a.num_classes}};
      if (!a.class_names.empty()) e["names"] = a.class_names;
      j["attributes"].push_back(std::move(e));
    }
  }
  return j.dump(2) + "\n";
}

std::string EncodeAnnotationValues(const DatasetAnnotations& annotations) {
  std::string out;
  for (int64_t o : annotations.labels.offsets) PutLe(static_cast<uint64_t>(o), 8, &out);
  for (int32_t id : annotations.labels.ids) PutLe(static_cast<uint32_t>(id), 4, &out);
  for (const Attribute& a : annotations.attributes) {
    for (int32_t v : a.values) PutLe(static_cast<uint32_t>(v), 4, &out);
  }
  return out;
}

Status DecodeAnnotationValues(const std::string& bytes, int64_t num_samples,
                              const std::string& where, DatasetAnnotations* annotations) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint64_t n = static_cast<uint64_t>(num_samples);
  uint64_t need = annotations->attributes.size() * n * 4;
  if (!annotations->labels.empty()) need += (n + 1) * 8;
  if (bytes.size() < need) {
    return Status::DataLoss(where + " is " + std::to_string(bytes.size()) +
                            " bytes, too short for " + std::to_string(n) +
                            " samples; the index is damaged: rebuild it");
  }
  size_t pos = 0;
  LabelSets& labels = annotations->labels;
  if (!labels.empty()) {
    labels.offsets.assign(n + 1, 0);
    for (uint64_t i = 0; i <= n; ++i, pos += 8)
      labels.offsets[i] = static_cast<int64_t>(GetLe(p + pos, 8));
    const uint64_t num_ids = static_cast<uint64_t>(labels.offsets[n]);
    if (num_ids > (bytes.size() - need) / 4) {
      return Status::DataLoss(where +
                              " holds fewer label ids than its offsets say; the index is "
                              "damaged: rebuild it");
    }
    need += num_ids * 4;
    labels.ids.resize(num_ids);
    for (uint64_t k = 0; k < num_ids; ++k, pos += 4) {
      labels.ids[k] = static_cast<int32_t>(static_cast<uint32_t>(GetLe(p + pos, 4)));
    }
  }
  if (bytes.size() != need) {
    return Status::DataLoss(where + " is " + std::to_string(bytes.size()) + " bytes, expected " +
                            std::to_string(need) + "; the index is damaged: rebuild it");
  }
  for (Attribute& a : annotations->attributes) {
    a.values.resize(n);
    for (uint64_t i = 0; i < n; ++i, pos += 4) {
      a.values[i] = static_cast<int32_t>(static_cast<uint32_t>(GetLe(p + pos, 4)));
    }
  }
  Status checked = annotations->Check(num_samples);
  if (!checked.ok()) {
    return Status::DataLoss(where + ": " + checked.message() +
                            "; the index is damaged: rebuild it");
  }
  return Status::Ok();
}

AnnotationMembers::AnnotationMembers(const DatasetAnnotations* declared)
    : declared_(declared), values_(declared->attributes.size(), -1) {}

bool AnnotationMembers::Wants(const std::string& extension) const {
  if (extension == "labels") return !declared_->labels.empty();
  if (extension.size() <= 4 || extension.compare(extension.size() - 4, 4, ".cls") != 0) {
    return false;
  }
  return declared_->FindAttribute(extension.substr(0, extension.size() - 4)) != nullptr;
}

int64_t AnnotationMembers::MaxBytes(const std::string& extension) const {
  return extension == "labels" ? kMaxLabelsMemberBytes : kMaxAttributeMemberBytes;
}

Status AnnotationMembers::Add(const std::string& extension, const std::string& data,
                              const std::string& where) {
  if (extension == "labels") {
    if (has_labels_) return Status::InvalidArgument(where + ": the sample has a second .labels");
    has_labels_ = true;
    std::string token;
    for (size_t i = 0; i <= data.size(); ++i) {
      const char c = i < data.size() ? data[i] : ' ';
      if (c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r') {
        if (token.empty()) continue;
        int32_t id = 0;
        if (!ParseId(token, &id) || id >= declared_->labels.num_labels) {
          return Status::InvalidArgument(where + " holds '" + EscapeControlChars(token) +
                                         "': label ids are integers in [0, " +
                                         std::to_string(declared_->labels.num_labels) +
                                         ") (labels.count of " + kAnnotationsJson + ")");
        }
        labels_.push_back(id);
        token.clear();
      } else {
        token.push_back(c);
      }
    }
    std::sort(labels_.begin(), labels_.end());
    labels_.erase(std::unique(labels_.begin(), labels_.end()), labels_.end());
    if (labels_.size() > static_cast<size_t>(kMaxLabelsPerSample)) {
      return Status::InvalidArgument(where + " holds " + std::to_string(labels_.size()) +
                                     " labels, more than " + std::to_string(kMaxLabelsPerSample));
    }
    return Status::Ok();
  }
  const std::string name = extension.substr(0, extension.size() - 4);
  const size_t a = static_cast<size_t>(declared_->FindAttribute(name) - &declared_->attributes[0]);
  if (values_[a] >= 0) {
    return Status::InvalidArgument(where + ": the sample has a second ." + extension);
  }
  std::string text = data;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.pop_back();
  }
  int32_t v = 0;
  if (!ParseId(text, &v) || v >= declared_->attributes[a].num_classes) {
    return Status::InvalidArgument(where + " holds '" + EscapeControlChars(text) + "': " + name +
                                   " is an integer in [0, " +
                                   std::to_string(declared_->attributes[a].num_classes) +
                                   ") (its count in " + kAnnotationsJson + ")");
  }
  values_[a] = v;
  return Status::Ok();
}

Status AnnotationMembers::Finish(bool keep, const std::string& where, DatasetAnnotations* out) {
  Status status = Status::Ok();
  if (keep) {
    if (!declared_->labels.empty() && !has_labels_) {
      status = Status::InvalidArgument(where + " has no .labels member, but " + kAnnotationsJson +
                                       " beside the shards declares label sets: give every "
                                       "sample one (an empty member for no label)");
    }
    for (size_t a = 0; a < values_.size() && status.ok(); ++a) {
      if (values_[a] < 0) {
        status = Status::InvalidArgument(where + " has no ." + declared_->attributes[a].name +
                                         ".cls member, but " + kAnnotationsJson +
                                         " beside the shards declares that attribute: give "
                                         "every sample one");
      }
    }
    if (status.ok()) {
      if (!declared_->labels.empty()) {
        out->labels.ids.insert(out->labels.ids.end(), labels_.begin(), labels_.end());
        out->labels.offsets.push_back(static_cast<int64_t>(out->labels.ids.size()));
      }
      for (size_t a = 0; a < values_.size(); ++a) out->attributes[a].values.push_back(values_[a]);
    }
  }
  has_labels_ = false;
  labels_.clear();
  std::fill(values_.begin(), values_.end(), -1);
  return status;
}

}  // namespace mlcd
