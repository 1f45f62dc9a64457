#include "client/sample_ids.h"

#include <exception>
#include <sstream>

#include "common/npy.h"

namespace mlcd::cli {

StatusOr<std::vector<uint64_t>> ParseIdList(const std::string& text) {
  std::vector<uint64_t> ids;
  std::stringstream stream(text);
  std::string item;
  auto parse_one = [&](const std::string& s, uint64_t* out) -> Status {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("--ids: '" + s +
                                     "' is not a sample id (use non-negative integers, e.g. "
                                     "--ids 0,17,4999 or --ids 0:100)");
    }
    try {
      *out = std::stoull(s);
    } catch (const std::exception&) {
      return Status::InvalidArgument("--ids: '" + s + "' is out of range for a uint64 sample id");
    }
    return Status::Ok();
  };
  while (std::getline(stream, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) {
      uint64_t id;
      MLCD_RETURN_IF_ERROR(parse_one(item, &id));
      ids.push_back(id);
      continue;
    }
    uint64_t begin, end;
    MLCD_RETURN_IF_ERROR(parse_one(item.substr(0, colon), &begin));
    MLCD_RETURN_IF_ERROR(parse_one(item.substr(colon + 1), &end));
    if (end <= begin || end - begin > kMaxIdsPerRange) {
      return Status::InvalidArgument("--ids: range '" + item +
                                     "' must be A:B with A < B (B exclusive) and at most 1e8 ids");
    }
    for (uint64_t id = begin; id < end; ++id) ids.push_back(id);
  }
  if (ids.empty())
    return Status::InvalidArgument("--ids is empty; give ids like 0,17,4999 or 0:100");
  return ids;
}

StatusOr<std::vector<uint64_t>> ReadIdsFile(const std::string& path) {
  std::vector<int64_t> shape;
  MLCD_ASSIGN_OR_RETURN(auto values, ReadNpyAsInt64(path, &shape));
  if (shape.size() > 2 || (shape.size() == 2 && shape[1] != 1)) {
    return Status::InvalidArgument(
        path + ": ids must be a 1-d array (or n x 1), got " + std::to_string(shape.size()) +
        "-d with " + (shape.size() == 2 ? std::to_string(shape[1]) : std::string("?")) +
        " columns");
  }
  std::vector<uint64_t> ids(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0) {
      return Status::InvalidArgument(path + ": id " + std::to_string(values[i]) + " at position " +
                                     std::to_string(i) + " is negative");
    }
    ids[i] = static_cast<uint64_t>(values[i]);
  }
  return ids;
}

}  // namespace mlcd::cli
