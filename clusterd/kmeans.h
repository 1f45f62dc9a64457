// Spherical k-means of feature rows with FAISS (faiss::Clustering, spherical = true, an
// IndexFlatIP assigning points by inner product), driven one iteration at a time so that
// every iteration's statistics reach the caller as they happen and a cancel stops the work
// between (and, through FAISS's interrupt callback, inside) iterations.
//
// Rows are L2-normalised on the way in. When the input has more than
// k * max_points_per_centroid rows, a uniform sample of that many rows (read in ascending
// order from the memory-mapped shards, never the whole input) trains the centroids; all
// rows are assigned afterwards (assign.h). Memory: the training sample,
// min(n, k * max_points_per_centroid) * d * 4 bytes, plus k * d * 4 for the centroids.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "clusterd/feature_source.h"
#include "common/sample_rows.h"
#include "common/status.h"

namespace mlcd::clusterd {

struct SphericalKMeansParams {
  // Number of centroids, 1 <= k <= number of rows. Required.
  int k = 0;
  // Lloyd iterations.
  int niter = 20;
  // Seeds the training sample and FAISS's initial centroids (k random training points).
  uint64_t seed = 1234;
  // The training sample holds at most k * max_points_per_centroid rows (FAISS's default).
  int max_points_per_centroid = 256;
  // OpenMP/BLAS threads for the job (0 = all cores).
  int threads = 0;
};

// Checks params against an input of `rows` rows: INVALID_ARGUMENT saying what to change.
Status ValidateKMeansParams(const SphericalKMeansParams& params, int64_t rows);

struct KMeansIterationStats {
  int iteration = 0;  // 0-based
  // Sum over training rows of the inner product with their nearest centroid before this
  // iteration's update (spherical k-means maximises it).
  double objective = 0;
  // FAISS's imbalance factor of this iteration's assignment: k * sum(size^2) / n^2 (1 = all
  // clusters the same size).
  double imbalance_factor = 0;
  // Empty clusters re-seeded by splitting large ones in this iteration.
  int splits = 0;
  // Seconds since the start of the first iteration.
  double seconds = 0;
};

struct KMeansResult {
  int k = 0;
  int d = 0;
  // k x d, row-major, every row of unit L2 norm.
  std::vector<float> centroids;
  int64_t num_points = 0;
  int64_t num_train_points = 0;
  std::vector<KMeansIterationStats> iterations;
  // Seconds reading the training sample, and in the iterations.
  double read_seconds = 0;
  double train_seconds = 0;
};

struct KMeansCallbacks {
  // Polled between iterations and inside FAISS searches; returning true ends the job with
  // CANCELLED.
  std::function<bool()> should_stop;
  // Phase changes ("reading a training sample of ... rows").
  std::function<void(const std::string&)> on_note;
  // After every iteration.
  std::function<void(const KMeansIterationStats&)> on_iteration;
};

// Trains k centroids on `shards`. The shards should have passed CheckFinite().
StatusOr<KMeansResult> TrainSphericalKMeans(const FeatureShards& shards,
                                            const SphericalKMeansParams& params,
                                            const KMeansCallbacks& callbacks = {});

// `m` distinct rows of [0, n) drawn uniformly (selection sampling), ascending (common/).
using mlcd::SampleRows;

}  // namespace mlcd::clusterd
