#include "clients/labelstore_limits.h"

#include <algorithm>
#include <cmath>

namespace mlcd::labelstore {

size_t MaxRowsPerMessage(int32_t labels_per_sample) {
  if (labels_per_sample <= 0) return kMaxRowsPerWriteMessage;
  return std::min(kMaxRowsPerWriteMessage,
                  kMaxValuesPerMessage / static_cast<size_t>(labels_per_sample));
}

Status ValidateLabelSetName(const std::string& name) {
  if (name.empty()) {
    return Status::InvalidArgument("label set name is empty; give a name like 'job/abc123/r0'");
  }
  if (name.size() > kMaxNameLength) {
    return Status::InvalidArgument("label set name is " + std::to_string(name.size()) +
                                   " characters long; the limit is " +
                                   std::to_string(kMaxNameLength));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '/' || c == '-';
    if (!ok) {
      std::string shown = (c >= 0x20 && c < 0x7f) ? std::string("'") + static_cast<char>(c) + "'"
                                                  : "byte " + std::to_string(static_cast<int>(c));
      return Status::InvalidArgument("label set name '" + name + "' has " + shown +
                                     " at position " + std::to_string(i) +
                                     "; use only letters, digits and . _ / -");
    }
  }
  if (name.front() == '/' || name.back() == '/' || name.find("//") != std::string::npos) {
    return Status::InvalidArgument("label set name '" + name +
                                   "' has an empty path segment (leading, trailing or double '/')");
  }
  for (size_t begin = 0; begin <= name.size();) {
    size_t end = name.find('/', begin);
    if (end == std::string::npos) end = name.size();
    const std::string segment = name.substr(begin, end - begin);
    if (segment == "." || segment == "..") {
      return Status::InvalidArgument("label set name '" + name + "' has a '" + segment +
                                     "' path segment");
    }
    begin = end + 1;
  }
  return Status::Ok();
}

Status ValidateCreateRequest(const v1::CreateLabelSetRequest& request) {
  MLCD_RETURN_IF_ERROR(ValidateLabelSetName(request.name()));
  if (request.num_classes() < 1) {
    return Status::InvalidArgument("num_classes (k) is " + std::to_string(request.num_classes()) +
                                   "; it must be at least 1 (cluster ids are in [0, k))");
  }
  if (request.labels_per_sample() < 1 || request.labels_per_sample() > kMaxLabelsPerSample) {
    return Status::InvalidArgument(
        "labels_per_sample (l) is " + std::to_string(request.labels_per_sample()) +
        "; it must be in [1, " + std::to_string(kMaxLabelsPerSample) + "]");
  }
  if (request.labels_per_sample() > request.num_classes()) {
    return Status::InvalidArgument(
        "labels_per_sample (l = " + std::to_string(request.labels_per_sample()) +
        ") exceeds num_classes (k = " + std::to_string(request.num_classes()) +
        "); a sample's l labels are distinct clusters, so l <= k");
  }
  if (static_cast<size_t>(request.metadata_size()) > kMaxMetadataEntries) {
    return Status::InvalidArgument("metadata has " + std::to_string(request.metadata_size()) +
                                   " entries; the limit is " + std::to_string(kMaxMetadataEntries));
  }
  for (const auto& [key, value] : request.metadata()) {
    if (key.empty() || key.size() > kMaxMetadataKeyBytes) {
      return Status::InvalidArgument("metadata key '" + key.substr(0, 40) + "' must be 1.." +
                                     std::to_string(kMaxMetadataKeyBytes) + " bytes");
    }
    if (value.size() > kMaxMetadataValueBytes) {
      return Status::InvalidArgument("metadata value of '" + key + "' is " +
                                     std::to_string(value.size()) + " bytes; the limit is " +
                                     std::to_string(kMaxMetadataValueBytes));
    }
  }
  return Status::Ok();
}

Status ValidateWriteMessage(const v1::WriteLabelsRequest& request, const LabelSetShape& shape,
                            std::vector<uint64_t>* scratch) {
  const size_t n = static_cast<size_t>(request.sample_ids_size());
  const size_t l = static_cast<size_t>(shape.labels_per_sample);
  if (n == 0) {
    return Status::InvalidArgument(
        "empty batch: the message has no sample ids; send at least one row");
  }
  const size_t max_rows = MaxRowsPerMessage(shape.labels_per_sample);
  if (n > max_rows) {
    return Status::InvalidArgument("batch of " + std::to_string(n) +
                                   " rows is too large; at most " + std::to_string(max_rows) +
                                   " rows per message for l = " + std::to_string(l) +
                                   " (split the rows over several messages)");
  }
  if (static_cast<size_t>(request.labels_size()) != n * l) {
    return Status::InvalidArgument("wrong row width: " + std::to_string(n) + " sample ids need " +
                                   std::to_string(n * l) + " labels (l = " + std::to_string(l) +
                                   " per row), got " + std::to_string(request.labels_size()));
  }
  if (shape.with_scores) {
    if (static_cast<size_t>(request.scores_size()) != n * l) {
      return Status::InvalidArgument("scores mismatch: the set stores scores, so " +
                                     std::to_string(n) + " rows need " + std::to_string(n * l) +
                                     " scores, got " + std::to_string(request.scores_size()));
    }
  } else if (request.scores_size() != 0) {
    return Status::InvalidArgument(
        "scores mismatch: the set was created without scores but the message has " +
        std::to_string(request.scores_size()) +
        " scores (create the set with with_scores, or send no scores)");
  }
  MLCD_RETURN_IF_ERROR(ValidateLabelRows(request.sample_ids().data(), n, request.labels().data(),
                                         shape.with_scores ? request.scores().data() : nullptr,
                                         shape));
  return CheckUniqueIds(request.sample_ids().data(), n, "one message", scratch);
}

Status ValidateLabelRows(const uint64_t* ids, size_t n, const int32_t* labels, const float* scores,
                         const LabelSetShape& shape) {
  const size_t l = static_cast<size_t>(shape.labels_per_sample);
  const int32_t k = shape.num_classes;
  std::string first;  // what is wrong with the first bad row
  size_t bad_rows = 0;
  for (size_t r = 0; r < n; ++r) {
    const int32_t* row = labels + r * l;
    bool bad = false;
    for (size_t c = 0; c < l && !bad; ++c) {
      if (row[c] >= 0 && row[c] < k) continue;
      bad = true;
      if (first.empty()) {
        first = "label " + std::to_string(row[c]) + " of sample id " + std::to_string(ids[r]) +
                " (row " + std::to_string(r) + ", column " + std::to_string(c) +
                ") is outside [0, " + std::to_string(k) + ")";
      }
    }
    for (size_t c = 0; scores && c < l && !bad; ++c) {
      if (std::isfinite(scores[r * l + c])) continue;
      bad = true;
      if (first.empty()) {
        first = "score of sample id " + std::to_string(ids[r]) + " (row " + std::to_string(r) +
                ", column " + std::to_string(c) + ") is not finite";
      }
    }
    bad_rows += bad;
  }
  if (bad_rows == 0) return Status::Ok();
  return Status::InvalidArgument(first + "; " + std::to_string(bad_rows) + " of " +
                                 std::to_string(n) + " rows " + (bad_rows == 1 ? "is" : "are") +
                                 " bad (labels must be in [0, k), scores finite)");
}

Status CheckUniqueIds(const uint64_t* ids, size_t n, const std::string& where,
                      std::vector<uint64_t>* scratch) {
  scratch->assign(ids, ids + n);
  std::sort(scratch->begin(), scratch->end());
  auto dup = std::adjacent_find(scratch->begin(), scratch->end());
  if (dup != scratch->end()) {
    return Status::InvalidArgument("duplicate ids: sample id " + std::to_string(*dup) +
                                   " appears more than once in " + where +
                                   "; give each sample id once");
  }
  return Status::Ok();
}

Status ValidateReadSize(size_t num_ids, int32_t labels_per_sample) {
  if (num_ids == 0) {
    return Status::InvalidArgument("empty batch: GetLabels needs at least one sample id");
  }
  if (num_ids > kMaxIdsPerRead) {
    return Status::InvalidArgument("batch of " + std::to_string(num_ids) +
                                   " ids is too large; at most " + std::to_string(kMaxIdsPerRead) +
                                   " ids per GetLabels request");
  }
  if (labels_per_sample > 0 &&
      num_ids * static_cast<size_t>(labels_per_sample) > kMaxValuesPerMessage) {
    return Status::InvalidArgument(
        "batch of " + std::to_string(num_ids) + " ids x l = " + std::to_string(labels_per_sample) +
        " exceeds " + std::to_string(kMaxValuesPerMessage) +
        " values per request; ask for at most " +
        std::to_string(kMaxValuesPerMessage / labels_per_sample) + " ids");
  }
  return Status::Ok();
}

}  // namespace mlcd::labelstore
