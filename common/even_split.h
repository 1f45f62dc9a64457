// How the ranks of a gang split n things (rows of a batch or a feature file, class centres):
// rank r of W takes the contiguous range [n * r / W, n * (r + 1) / W), so the ranges are in
// rank order, cover [0, n) and differ in size by at most one.
#pragma once

#include <cstdint>

namespace mlcd {

// The first of the `total` things rank `rank` of `world` takes; EvenSplitBegin(total, world,
// rank + 1) ends its range. The product is taken in 128 bits, so any int64 total is exact.
// 0 when world <= 0 or total <= 0.
inline int64_t EvenSplitBegin(int64_t total, int world, int rank) {
  if (world <= 0 || total <= 0) return 0;
  return static_cast<int64_t>((static_cast<__int128>(total) * rank) / world);
}

}  // namespace mlcd
