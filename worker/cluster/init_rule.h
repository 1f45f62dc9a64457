// FAISS's k-means initialisation, for the worker gang's engine to start where clusterd's
// FAISS path starts (clusterd/kmeans.cc: faiss::Clustering with nredo = 1, seed =
// params.seed & 0x7fffffff). FAISS draws a random permutation `perm` of the nx training rows
// (faiss::rand_perm with seed + 1, a Fisher-Yates shuffle over faiss::RandomGenerator) and
// takes training row perm[i] as centroid i. Only perm[0..k) matters, and Fisher-Yates fixes
// perm[i] at its step i, so the first k steps are replayed over a sparse map: O(k) time and
// memory instead of the nx ints FAISS allocates (1 GB at nx = 256M).
#pragma once

#include <cstdint>
#include <vector>

namespace mlcd::worker::cluster {

// perm[0..k) of faiss::rand_perm(perm, nx, faiss_seed + 1), where faiss_seed is the int seed
// FAISS's ClusteringParameters hold. 1 <= k <= nx < 2^31.
std::vector<int64_t> FaissInitialRows(int64_t nx, int k, int64_t faiss_seed);

// The int seed clusterd hands FAISS for a job seed.
inline int64_t FaissSeed(uint64_t seed) { return static_cast<int64_t>(seed & 0x7fffffff); }

}  // namespace mlcd::worker::cluster
