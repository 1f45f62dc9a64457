// Striped locks over the blocks of one label set, so that WriteLabels streams of one set (the
// gang's ranks, each writing its own sample ids) read-modify-write their blocks in parallel
// and still never lose a row when two of them touch the same block.
//
// A block number maps to one of kBlockLockStripes mutexes (block % stripes). A writer holds
// the stripes of every block of its message from before it reads those blocks until after
// its commit, so a later writer of a shared block reads the committed version. Stripes are
// taken in ascending order, so two writers never deadlock.
//
// Lock order in LabelStorage: block stripes before the set's write_mu (labelstore/storage.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace mlcd::labelstore {

// Stripes per set: more than the writers of one set (8-80 ranks) need, so that writers of
// disjoint id ranges rarely wait on a stripe they do not share a block on.
inline constexpr size_t kBlockLockStripes = 256;

class BlockLocks {
 public:
  // Holds the stripes it was given until destroyed.
  class Held {
   public:
    Held() = default;
    Held(Held&&) = default;
    Held& operator=(Held&&) = default;

   private:
    friend class BlockLocks;
    std::vector<std::unique_lock<std::mutex>> locks_;
  };

  BlockLocks() = default;
  BlockLocks(const BlockLocks&) = delete;
  BlockLocks& operator=(const BlockLocks&) = delete;

  // Locks the stripes of `blocks` (any order, repeats allowed), lowest stripe first.
  Held Lock(const std::vector<uint64_t>& blocks);

 private:
  std::array<std::mutex, kBlockLockStripes> stripes_;
};

}  // namespace mlcd::labelstore
