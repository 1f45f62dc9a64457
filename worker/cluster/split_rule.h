// FAISS's rule for empty clusters (faiss/Clustering.cpp, split_clusters), decided on the
// host from the all-reduced counts, which are the same on every rank, so every rank makes the
// same splits. For each empty cluster ci in order, a cluster cj is picked by walking
// cj = 0, 1, ... (wrapping) and taking it with probability (count[cj] - 1) / (n - k) against
// faiss::RandomGenerator(1234) draws (a fresh generator per iteration, as FAISS does); ci
// becomes a copy of cj's mean, both are pushed apart by a factor 1 +- 1/1024 on alternating
// coordinates, and cj's count is split in half between them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace mlcd::worker::cluster {

struct ClusterSplit {
  int64_t empty = 0;   // ci: the cluster that had no rows
  int64_t source = 0;  // cj: the cluster split in two
};

// The splits of one iteration, in the order they are applied; updates `counts` (k entries,
// FAISS's float `hassign`) as FAISS does. `n` is the number of training rows (n > k).
std::vector<ClusterSplit> PlanSplits(std::vector<float>& counts, int64_t n);

// Applies `splits` in order to the k x d (unnormalised) means, on their device.
void ApplySplits(const std::vector<ClusterSplit>& splits, at::Tensor& means);

}  // namespace mlcd::worker::cluster
