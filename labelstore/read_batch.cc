#include "labelstore/read_batch.h"

namespace mlcd::labelstore {

//  - blocks spanning a small range (the usual case: dense ids): counting sort, O(n + span);
//  - else sort (block, position) packed into one u64 (ids < 2^44 * B), else as pairs.
void GroupByBlock(const uint64_t* ids, size_t n, int shift, ReadScratch* scratch) {
  ReadScratch& s = *scratch;
  uint64_t min_block = ~uint64_t{0}, max_block = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t block = ids[i] >> shift;
    min_block = std::min(min_block, block);
    max_block = std::max(max_block, block);
  }
  const uint64_t span = max_block - min_block + 1;
  s.blocks.clear();
  s.group_begin.clear();
  s.order.resize(n);
  if (span <= std::max<uint64_t>(4096, 4 * static_cast<uint64_t>(n))) {
    s.cursor.assign(span, 0);
    for (size_t i = 0; i < n; ++i) ++s.cursor[(ids[i] >> shift) - min_block];
    uint32_t offset = 0;
    for (uint64_t b = 0; b < span; ++b) {
      const uint32_t count = s.cursor[b];
      s.cursor[b] = offset;
      if (count > 0) {
        s.blocks.push_back(min_block + b);
        s.group_begin.push_back(offset);
        offset += count;
      }
    }
    for (size_t i = 0; i < n; ++i)
      s.order[s.cursor[(ids[i] >> shift) - min_block]++] = static_cast<uint32_t>(i);
  } else if (max_block < (uint64_t{1} << (64 - kIndexBits))) {
    s.packed.resize(n);
    for (size_t i = 0; i < n; ++i) s.packed[i] = ((ids[i] >> shift) << kIndexBits) | i;
    std::sort(s.packed.begin(), s.packed.end());
    for (size_t i = 0; i < n; ++i) {
      const uint64_t block = s.packed[i] >> kIndexBits;
      s.order[i] = static_cast<uint32_t>(s.packed[i] & ((uint64_t{1} << kIndexBits) - 1));
      if (s.blocks.empty() || s.blocks.back() != block) {
        s.blocks.push_back(block);
        s.group_begin.push_back(static_cast<uint32_t>(i));
      }
    }
  } else {
    s.pairs.resize(n);
    for (size_t i = 0; i < n; ++i) s.pairs[i] = {ids[i] >> shift, static_cast<uint32_t>(i)};
    std::sort(s.pairs.begin(), s.pairs.end());
    for (size_t i = 0; i < n; ++i) {
      s.order[i] = s.pairs[i].second;
      if (s.blocks.empty() || s.blocks.back() != s.pairs[i].first) {
        s.blocks.push_back(s.pairs[i].first);
        s.group_begin.push_back(static_cast<uint32_t>(i));
      }
    }
  }
  s.group_begin.push_back(static_cast<uint32_t>(n));
}

}  // namespace mlcd::labelstore
