#include "common/sample_rows.h"

#include <algorithm>
#include <random>

namespace mlcd {

std::vector<int64_t> SampleRowsInRange(int64_t n, int64_t m, uint64_t seed, int64_t begin,
                                       int64_t end) {
  std::vector<int64_t> out;
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, n);
  if (begin >= end) return out;
  if (m >= n) {
    out.resize(static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i) out[i - begin] = i;
    return out;
  }
  // Knuth's algorithm S: row i is taken with probability (still needed) / (rows left). Every
  // caller walks the draws from row 0 so that the stream is the same for every range.
  std::mt19937_64 rng(seed ^ 0x5eed5a3b1e0fULL);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int64_t needed = m;
  for (int64_t i = 0; i < end && needed > 0; ++i) {
    if (uniform(rng) * static_cast<double>(n - i) < static_cast<double>(needed)) {
      if (i >= begin) out.push_back(i);
      --needed;
    }
  }
  return out;
}

std::vector<int64_t> SampleRows(int64_t n, int64_t m, uint64_t seed) {
  return SampleRowsInRange(n, m, seed, 0, n);
}

}  // namespace mlcd
