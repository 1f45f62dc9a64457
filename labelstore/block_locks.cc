#include "labelstore/block_locks.h"

#include <algorithm>

namespace mlcd::labelstore {

BlockLocks::Held BlockLocks::Lock(const std::vector<uint64_t>& blocks) {
  std::vector<size_t> stripes;
  stripes.reserve(blocks.size());
  for (uint64_t block : blocks) stripes.push_back(static_cast<size_t>(block % kBlockLockStripes));
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
  Held held;
  if (stripes.size() > kMaxStripesPerWrite) {
    held.whole_set_ = std::unique_lock<std::shared_mutex>(set_);
    return held;
  }
  held.set_shared_ = std::shared_lock<std::shared_mutex>(set_);
  held.stripes_.reserve(stripes.size());
  for (size_t s : stripes) held.stripes_.emplace_back(stripes_[s]);
  return held;
}

}  // namespace mlcd::labelstore
