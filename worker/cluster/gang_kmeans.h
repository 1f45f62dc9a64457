// Spherical k-means on the worker gang: every rank holds a contiguous range of the unit-norm
// feature rows (gang_layout.h) on its device, and the ranks together run the algorithm of
// clusterd's FAISS path (clusterd/kmeans.h), step for step:
//   - the training sample is SampleRows(total rows, k * max_points_per_centroid, seed)
//     (common/sample_rows.h), each rank keeping the sample rows of its own range, so the
//     union is what one process draws;
//   - centroid i starts as training row perm[i] of FAISS's permutation (init_rule.h); the
//     rank holding that row contributes it and one all-reduce gives every rank all k;
//   - each iteration: local search (GEMM + argmax, chunked, nearest.h) accumulating
//     per-cluster sums, counts and the objective, then ONE all-reduce of [sums | counts |
//     objective]; means = sums / counts, empty clusters split by FAISS's rule from the reduced
//     counts (split_rule.h, the same decision on every rank), rows renormalised;
//   - when the sample has exactly k rows the centroids are the sample (FAISS's copy case).
// Centroids are checkpointed by rank 0 every `checkpoint_every` iterations; a run that finds
// a checkpoint of the same run resumes after its iterations.
//
// Memory per rank: the rows (owned by the caller), the local sample (a copy unless the sample
// is every row), centroids k x d float32, the accumulator k x (d + 1) + 1 of the accumulation
// dtype (float64 on the CPU, float32 on CUDA; counts are exact up to 2^24 rows per cluster in
// float32), and one chunk's scores (SearchOptions::workspace_bytes).
//
// All ranks must call it with the same params. Errors: INVALID_ARGUMENT for bad params or
// layout (the same on every rank), CANCELLED when should_stop said so, the collectives' codes
// when a peer fails (docs: worker/dist/collectives.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/cluster/nearest.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker::cluster {

struct GangKMeansParams {
  // Number of centroids, 1 <= k <= total rows. Required.
  int k = 0;
  // Lloyd iterations, [1, 100000].
  int niter = 20;
  // Seeds the sample and the initial centroids, as clusterd's seed does.
  uint64_t seed = 1234;
  // The sample holds at most k * max_points_per_centroid rows (FAISS's default 256).
  int max_points_per_centroid = 256;
  SearchOptions search;
  // Centroid checkpoint file (empty = none), written by rank 0 after every
  // `checkpoint_every` iterations and after the last one.
  std::string checkpoint_path;
  int checkpoint_every = 5;
};

struct GangKMeansIterationStats {
  int iteration = 0;            // 0-based
  double objective = 0;         // sum over sample rows of the best inner product, before update
  double imbalance_factor = 0;  // k * sum(count^2) / n^2 of this iteration's assignment
  int splits = 0;               // empty clusters re-seeded
  double seconds = 0;           // since the first iteration of this attempt began
};

struct GangKMeansResult {
  at::Tensor centroids;  // k x d float32 unit rows, on the rows' device, the same on every rank
  int64_t total_rows = 0;
  int64_t train_rows = 0;        // the whole sample
  at::Tensor local_sample_rows;  // int64 global row ids of this rank's sample rows (CPU)
  int resumed_after = 0;         // iterations taken from a checkpoint (0 = fresh start)
  std::vector<GangKMeansIterationStats> iterations;  // those run by this attempt
};

struct GangKMeansCallbacks {
  // Polled between iterations; true ends the run with CANCELLED. Should answer the same on
  // every rank (a rank that stops alone makes its peers fail at the next collective).
  std::function<bool()> should_stop;
  // After every iteration, with the updated centroids (k x d, on the device).
  std::function<void(const GangKMeansIterationStats&, const at::Tensor&)> on_iteration;
};

// INVALID_ARGUMENT saying what to change, for params against `total_rows` rows.
Status ValidateGangKMeansParams(const GangKMeansParams& params, int64_t total_rows);

// `rows`: this rank's n_r x d float32 rows of unit norm (NormalizeRowsInPlace), contiguous;
// `first_row`: the global index of its first row.
StatusOr<GangKMeansResult> TrainGangKMeans(const at::Tensor& rows, int64_t first_row,
                                           const GangKMeansParams& params, Collectives& comm,
                                           const GangKMeansCallbacks& callbacks = {});

// Scales every non-zero row to unit L2 norm in place (zero rows stay zero, as FAISS does).
void NormalizeRowsInPlace(at::Tensor& rows);

}  // namespace mlcd::worker::cluster
