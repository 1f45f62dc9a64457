// Sample ids as `mlcdctl` takes them: a list on the command line or an .npy file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::cli {

// The most ids one A:B range of --ids may name.
constexpr uint64_t kMaxIdsPerRange = 100000000;

// --ids text: "0,17,4999", with ranges "0:100,5000" (A:B = A..B-1, A < B). INVALID_ARGUMENT
// naming the bad item and the accepted forms; an empty list is an error.
StatusOr<std::vector<uint64_t>> ParseIdList(const std::string& text);

// An .npy of non-negative integers, 1-d or n x 1. INVALID_ARGUMENT naming the file and the
// first negative id or the wrong shape.
StatusOr<std::vector<uint64_t>> ReadIdsFile(const std::string& path);

}  // namespace mlcd::cli
