#include "clusterd/kmeans.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/impl/FaissException.h>

#include <chrono>

#include "clusterd/compute_env.h"
#include "common/stopwatch.h"

namespace mlcd::clusterd {

Status ValidateKMeansParams(const SphericalKMeansParams& params, int64_t rows) {
  if (params.k < 1)
    return Status::InvalidArgument("k must be >= 1, got " + std::to_string(params.k));
  if (params.k > rows) {
    return Status::InvalidArgument("k = " + std::to_string(params.k) +
                                   " is larger than the number of feature rows (" +
                                   std::to_string(rows) + "); use k <= " + std::to_string(rows));
  }
  if (params.niter < 1 || params.niter > 100000)
    return Status::InvalidArgument("niter must be in [1, 100000], got " +
                                   std::to_string(params.niter));
  if (params.max_points_per_centroid < 1)
    return Status::InvalidArgument("max_points_per_centroid must be >= 1, got " +
                                   std::to_string(params.max_points_per_centroid));
  MLCD_RETURN_IF_ERROR(CheckThreads(params.threads));
  return Status::Ok();
}

StatusOr<KMeansResult> TrainSphericalKMeans(const FeatureShards& shards,
                                            const SphericalKMeansParams& params,
                                            const KMeansCallbacks& callbacks) {
  MLCD_RETURN_IF_ERROR(ValidateKMeansParams(params, shards.rows()));
  auto note = [&](const std::string& text) {
    if (callbacks.on_note) callbacks.on_note(text);
  };
  ComputeScope scope(params.threads, callbacks.should_stop);

  const int d = shards.d();
  const int64_t n = shards.rows();
  const int64_t cap = static_cast<int64_t>(params.k) * params.max_points_per_centroid;
  KMeansResult result;
  result.k = params.k;
  result.d = d;
  result.num_points = n;

  // Training sample: every row, or `cap` rows drawn uniformly, read in ascending order.
  auto t_read = std::chrono::steady_clock::now();
  std::vector<float> train;
  int64_t nx;
  if (n <= cap) {
    nx = n;
    note("reading all " + std::to_string(n) + " rows for training");
    train.resize(static_cast<size_t>(n) * d);
    constexpr int64_t kChunk = 65536;
    for (int64_t b = 0; b < n; b += kChunk) {
      if (scope.ShouldStop()) return Status::Cancelled("k-means cancelled while reading features");
      shards.ReadRows(b, std::min(n, b + kChunk), train.data() + static_cast<size_t>(b) * d);
    }
  } else {
    nx = cap;
    note("sampling " + std::to_string(cap) + " of " + std::to_string(n) +
         " rows for training (k * " + std::to_string(params.max_points_per_centroid) +
         " max points per centroid)");
    std::vector<int64_t> rows = SampleRows(n, cap, params.seed);
    train.resize(static_cast<size_t>(nx) * d);
    constexpr size_t kChunk = 65536;
    for (size_t b = 0; b < rows.size(); b += kChunk) {
      if (scope.ShouldStop()) return Status::Cancelled("k-means cancelled while reading features");
      size_t e = std::min(rows.size(), b + kChunk);
      std::vector<int64_t> part(rows.begin() + b, rows.begin() + e);
      shards.GatherRows(part, train.data() + b * d);
    }
  }
  result.num_train_points = nx;
  result.read_seconds = SecondsSince(t_read);
  if (nx < static_cast<int64_t>(params.k) * 39) {
    note("only " + std::to_string(nx) + " training rows for k = " + std::to_string(params.k) +
         " (FAISS suggests at least 39 per centroid); centroids may be noisy");
  }

  // One FAISS call per iteration: the centroids of the previous call initialise the next, so
  // the sequence is the same as one call with niter iterations.
  faiss::ClusteringParameters cp;
  cp.niter = 1;
  cp.nredo = 1;
  cp.spherical = true;
  cp.verbose = false;
  cp.max_points_per_centroid = params.max_points_per_centroid;
  cp.min_points_per_centroid = 1;  // the warning above replaces FAISS's stderr one
  cp.seed = static_cast<int>(params.seed & 0x7fffffff);
  faiss::Clustering clustering(d, params.k, cp);
  faiss::IndexFlatIP index(d);
  note("k-means: " + std::to_string(nx) + " training rows, k = " + std::to_string(params.k) +
       ", d = " + std::to_string(d) + ", " + std::to_string(params.niter) + " iterations");
  auto t_train = std::chrono::steady_clock::now();
  const int iterations = nx == params.k ? 1 : params.niter;
  for (int it = 0; it < iterations; ++it) {
    if (scope.ShouldStop())
      return Status::Cancelled("k-means cancelled after " + std::to_string(it) + " iterations");
    try {
      clustering.train(nx, train.data(), index);
    } catch (const faiss::FaissException& e) {
      if (scope.stopped())
        return Status::Cancelled("k-means cancelled during iteration " + std::to_string(it));
      return Status::Internal(std::string("FAISS k-means failed: ") + e.what());
    }
    const faiss::ClusteringIterationStats& fs = clustering.iteration_stats.back();
    KMeansIterationStats stats;
    stats.iteration = it;
    stats.objective = fs.obj;
    stats.imbalance_factor = fs.imbalance_factor;
    stats.splits = fs.nsplit;
    stats.seconds = SecondsSince(t_train);
    result.iterations.push_back(stats);
    if (callbacks.on_iteration) callbacks.on_iteration(stats);
  }
  result.train_seconds = SecondsSince(t_train);
  result.centroids = std::move(clustering.centroids);
  // FAISS re-normalises after every update; do it once more so the output contract (unit
  // rows) holds whatever path FAISS took (e.g. the n == k copy).
  NormalizeRows(result.centroids.data(), params.k, d);
  return result;
}

}  // namespace mlcd::clusterd
