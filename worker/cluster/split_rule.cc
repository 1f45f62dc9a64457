#include "worker/cluster/split_rule.h"

#include <ATen/ATen.h>
#include <faiss/utils/random.h>

#include <unordered_map>

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
  // The rows the splits touch, each once, in first-touched order. They are applied on a host
  // copy of those rows and copied back: a split only multiplies by exact factors, so the
  // host's float products are the device's, and an early iteration with thousands of empty
  // clusters costs two copies instead of three kernel launches per split.
  std::unordered_map<int64_t, int64_t> slot;
  std::vector<int64_t> touched;
  for (const ClusterSplit& s : splits) {
    for (int64_t row : {s.source, s.empty}) {
      if (slot.emplace(row, static_cast<int64_t>(touched.size())).second) touched.push_back(row);
    }
  }
  at::Tensor index = at::tensor(touched, at::kLong).to(means.device());
  at::Tensor host = means.index_select(0, index).to(at::kCPU, at::kFloat).contiguous();
  float* h = host.data_ptr<float>();
  // Even coordinates: the new cluster grows by 1 + eps and the source shrinks by 1 - eps; odd
  // coordinates the other way round. Both factors are exact in float, so the products round
  // as FAISS's float *= double does.
  constexpr float kUp = 1.0f + 1.0f / 1024.0f, kDown = 1.0f - 1.0f / 1024.0f;
  for (const ClusterSplit& s : splits) {
    float* source = h + slot[s.source] * d;
    float* empty = h + slot[s.empty] * d;
    for (int64_t j = 0; j < d; ++j) {
      const bool even = j % 2 == 0;
      empty[j] = source[j] * (even ? kUp : kDown);
      source[j] *= even ? kDown : kUp;
    }
  }
  means.index_copy_(0, index, host.to(means.device(), means.scalar_type()));
}

}  // namespace mlcd::worker::cluster
