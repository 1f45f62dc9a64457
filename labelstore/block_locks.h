// Striped locks over the blocks of one label set, so that WriteLabels streams of one set (the
// gang's ranks, each writing its own sample ids) read-modify-write their blocks in parallel
// and still never lose a row when two of them touch the same block.
//
// A block number maps to one of kBlockLockStripes mutexes (block % stripes). A writer holds
// the stripes of every block of its message from before it reads those blocks until after
// its commit, so a later writer of a shared block reads the committed version. Stripes are
// taken in ascending order, under the set's shared lock, so two writers never deadlock. A
// message whose blocks fall on more than kMaxStripesPerWrite stripes (scattered ids) takes
// the set's lock exclusively instead: it waits for the other writers and they for it, and no
// thread ever holds more than kMaxStripesPerWrite + 1 locks.
//
// Lock order in LabelStorage: these locks before the set's write_mu (labelstore/storage.cc).
// Plain std::mutex, not mlcd::Mutex: which stripes a writer holds is chosen at run time from
// its blocks, so no GUARDED_BY can name them and clang's analysis has nothing to check.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

namespace mlcd::labelstore {

// Stripes per set: many more than the writers of one set (8-80 ranks), so that writers of
// disjoint id ranges rarely wait on a stripe they do not share a block on.
inline constexpr size_t kBlockLockStripes = 256;
// Stripes one write may hold; beyond, it locks the whole set (a gang rank's 1024-row message
// of consecutive ids spans 1-2 blocks).
inline constexpr size_t kMaxStripesPerWrite = 16;

class BlockLocks {
 public:
  // Holds what Lock took until destroyed.
  class Held {
   public:
    Held() = default;
    Held(Held&&) = default;
    Held& operator=(Held&&) = default;
    bool whole_set() const { return whole_set_.owns_lock(); }

   private:
    friend class BlockLocks;
    // Released in reverse order: stripes first, then the set's lock.
    std::shared_lock<std::shared_mutex> set_shared_;
    std::unique_lock<std::shared_mutex> whole_set_;
    std::vector<std::unique_lock<std::mutex>> stripes_;
  };

  BlockLocks() = default;
  BlockLocks(const BlockLocks&) = delete;
  BlockLocks& operator=(const BlockLocks&) = delete;

  // Locks the blocks (any order, repeats allowed): their stripes, lowest first, or the whole
  // set when they span more than kMaxStripesPerWrite stripes.
  Held Lock(const std::vector<uint64_t>& blocks);

 private:
  std::shared_mutex set_;
  std::array<std::mutex, kBlockLockStripes> stripes_;
};

}  // namespace mlcd::labelstore
