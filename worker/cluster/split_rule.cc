#include "worker/cluster/split_rule.h"

#include <ATen/ATen.h>
#include <faiss/utils/random.h>

namespace mlcd::worker::cluster {

std::vector<ClusterSplit> PlanSplits(std::vector<float>& counts, int64_t n) {
  std::vector<ClusterSplit> splits;
  const int64_t k = static_cast<int64_t>(counts.size());
  faiss::RandomGenerator rng(1234);
  for (int64_t ci = 0; ci < k; ++ci) {
    if (counts[ci] != 0) continue;
    int64_t cj = 0;
    for (;; cj = (cj + 1) % k) {
      float p = (counts[cj] - 1.0) / static_cast<float>(n - k);
      float r = rng.rand_float();
      if (r < p) break;
    }
    splits.push_back({ci, cj});
    counts[ci] = counts[cj] / 2;
    counts[cj] -= counts[ci];
  }
  return splits;
}

void ApplySplits(const std::vector<ClusterSplit>& splits, at::Tensor& means) {
  if (splits.empty()) return;
  const int64_t d = means.size(1);
  constexpr double kEps = 1.0 / 1024.0;
  // Even coordinates: the new cluster grows by 1 + eps and the source shrinks by 1 - eps; odd
  // coordinates the other way round. Both factors are exact in float, so the products round
  // as FAISS's float *= double does.
  at::Tensor even = (at::arange(d, means.options().dtype(at::kLong)) % 2 == 0);
  at::Tensor up = at::where(even, at::scalar_tensor(1 + kEps, means.options()),
                            at::scalar_tensor(1 - kEps, means.options()));
  at::Tensor down = at::where(even, at::scalar_tensor(1 - kEps, means.options()),
                              at::scalar_tensor(1 + kEps, means.options()));
  for (const ClusterSplit& s : splits) {
    at::Tensor source = means[s.source];
    means[s.empty].copy_(source * up);
    source.mul_(down);
  }
}

}  // namespace mlcd::worker::cluster
