#include "worker/cluster/gang_kmeans.h"

#include <ATen/ATen.h>

#include <chrono>
#include <climits>
#include <numeric>
#include <optional>

#include "common/sample_rows.h"
#include "common/stopwatch.h"
#include "worker/cluster/centroid_checkpoint.h"
#include "worker/cluster/gang_layout.h"
#include "worker/cluster/init_rule.h"
#include "worker/cluster/split_rule.h"

namespace mlcd::worker::cluster {
namespace {

// This rank's share of the training sample and where it sits in the whole sample.
struct LocalSample {
  at::Tensor rows;         // m_r x d on the device
  at::Tensor global_rows;  // int64 ids (CPU)
  int64_t offset = 0;      // index in the whole sample of this rank's first sample row
  int64_t total = 0;       // nx
};

StatusOr<LocalSample> DrawSample(const at::Tensor& rows, int64_t first_row, int64_t total_rows,
                                 const GangKMeansParams& p, Collectives& comm) {
  const int64_t cap = static_cast<int64_t>(p.k) * p.max_points_per_centroid;
  std::vector<int64_t> ids =
      SampleRowsInRange(total_rows, cap, p.seed, first_row, first_row + rows.size(0));
  LocalSample s;
  s.global_rows = at::tensor(ids, at::kLong);
  if (total_rows <= cap) {
    s.rows = rows;
  } else {
    s.rows = rows.index_select(0, (s.global_rows - first_row).to(rows.device()));
  }
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> counts,
                        GatherCounts(s.rows.size(0), rows.options(), comm));
  s.offset = std::accumulate(counts.begin(), counts.begin() + comm.rank(), int64_t{0});
  s.total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  return s;
}

// Centroid i = sample row init_rows[i]; the rank holding it contributes, one all-reduce.
StatusOr<at::Tensor> InitialCentroids(const LocalSample& s, int k, uint64_t seed,
                                      Collectives& comm) {
  std::vector<int64_t> init_rows(static_cast<size_t>(k));
  if (s.total == k) {
    std::iota(init_rows.begin(), init_rows.end(), int64_t{0});
  } else {
    init_rows = FaissInitialRows(s.total, k, FaissSeed(seed));
  }
  std::vector<int64_t> slots, local;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t at_row = init_rows[i] - s.offset;
    if (at_row >= 0 && at_row < s.rows.size(0)) {
      slots.push_back(i);
      local.push_back(at_row);
    }
  }
  at::Tensor centroids = at::zeros({k, s.rows.size(1)}, s.rows.options());
  if (!slots.empty()) {
    const auto dev = s.rows.device();
    centroids.index_copy_(0, at::tensor(slots, at::kLong).to(dev),
                          s.rows.index_select(0, at::tensor(local, at::kLong).to(dev)));
  }
  MLCD_RETURN_IF_ERROR(comm.AllReduce(centroids, ReduceOp::kSum));
  if (s.total != k) NormalizeRowsInPlace(centroids);  // FAISS post-processes; its copy case not
  return centroids;
}

// One Lloyd iteration over the local sample, one all-reduce, the update on every rank.
StatusOr<GangKMeansIterationStats> Iterate(const LocalSample& s, const GangKMeansParams& p,
                                           Collectives& comm, at::Tensor& centroids) {
  const int64_t k = p.k, d = centroids.size(1);
  const at::ScalarType acc_type = s.rows.is_cuda() ? at::kFloat : at::kDouble;
  at::Tensor acc = at::zeros({k * d + k + 1}, s.rows.options().dtype(acc_type));
  at::Tensor sums = acc.narrow(0, 0, k * d).view({k, d});
  at::Tensor counts = acc.narrow(0, k * d, k);
  const double objective = AccumulateNearest(s.rows, centroids, p.search, sums, counts);
  acc.narrow(0, k * d + k, 1).fill_(objective);
  MLCD_RETURN_IF_ERROR(comm.AllReduce(acc, ReduceOp::kSum));

  GangKMeansIterationStats stats;
  stats.objective = acc.narrow(0, k * d + k, 1).item<double>();
  at::Tensor host_counts = counts.to(at::kCPU, at::kFloat).contiguous();
  std::vector<float> hassign(host_counts.data_ptr<float>(), host_counts.data_ptr<float>() + k);
  double sq = 0;
  for (float c : hassign) sq += static_cast<double>(c) * c;
  stats.imbalance_factor = sq * k / (static_cast<double>(s.total) * s.total);

  at::Tensor f_counts = counts.to(at::kFloat);
  at::Tensor inv = at::where(f_counts > 0, f_counts.reciprocal(), at::zeros_like(f_counts));
  at::Tensor means = sums.to(at::kFloat) * inv.unsqueeze(1);
  std::vector<ClusterSplit> splits = PlanSplits(hassign, s.total);
  ApplySplits(splits, means);
  stats.splits = static_cast<int>(splits.size());
  NormalizeRowsInPlace(means);
  centroids = means;
  return stats;
}

}  // namespace

void NormalizeRowsInPlace(at::Tensor& rows) {
  at::Tensor norms = rows.norm(2, {1}, /*keepdim=*/true);
  rows.div_(at::where(norms > 0, norms, at::ones_like(norms)));
}

Status ValidateGangKMeansParams(const GangKMeansParams& p, int64_t total_rows) {
  if (p.k < 1) return Status::InvalidArgument("k must be >= 1, got " + std::to_string(p.k));
  if (p.k > total_rows) {
    return Status::InvalidArgument("k = " + std::to_string(p.k) +
                                   " is larger than the number of feature rows (" +
                                   std::to_string(total_rows) + "); use k <= " +
                                   std::to_string(total_rows));
  }
  if (p.niter < 1 || p.niter > 100000)
    return Status::InvalidArgument("niter must be in [1, 100000], got " + std::to_string(p.niter));
  if (p.max_points_per_centroid < 1)
    return Status::InvalidArgument("max_points_per_centroid must be >= 1, got " +
                                   std::to_string(p.max_points_per_centroid));
  const int64_t sample = std::min<int64_t>(total_rows, int64_t{p.k} * p.max_points_per_centroid);
  if (sample > INT_MAX) {
    return Status::InvalidArgument(
        "the training sample would hold " + std::to_string(sample) +
        " rows, more than FAISS's initialisation addresses (2^31 - 1); lower "
        "max_points_per_centroid to at most " + std::to_string(INT_MAX / p.k));
  }
  if (!p.checkpoint_path.empty() && p.checkpoint_every < 1)
    return Status::InvalidArgument("checkpoint_every must be >= 1, got " +
                                   std::to_string(p.checkpoint_every));
  return Status::Ok();
}

StatusOr<GangKMeansResult> TrainGangKMeans(const at::Tensor& rows, int64_t first_row,
                                           const GangKMeansParams& p, Collectives& comm,
                                           const GangKMeansCallbacks& callbacks) {
  MLCD_ASSIGN_OR_RETURN(GangLayout layout, GatherLayout(rows, first_row, comm));
  MLCD_RETURN_IF_ERROR(ValidateGangKMeansParams(p, layout.total_rows));
  if (rows.scalar_type() != at::kFloat)
    return Status::InvalidArgument("feature rows must be float32 on the device");
  MLCD_RETURN_IF_ERROR(ValidateSearchOptions(p.search, rows));
  MLCD_ASSIGN_OR_RETURN(LocalSample sample,
                        DrawSample(rows, first_row, layout.total_rows, p, comm));
  GangKMeansResult result;
  result.total_rows = layout.total_rows;
  result.train_rows = sample.total;
  result.local_sample_rows = sample.global_rows;

  CentroidCheckpoint expect;
  expect.k = p.k;
  expect.d = static_cast<int>(layout.d);
  expect.seed = p.seed;
  expect.train_rows = sample.total;
  std::optional<CentroidCheckpoint> resume;
  if (!p.checkpoint_path.empty()) {
    MLCD_ASSIGN_OR_RETURN(resume, LoadCentroidCheckpoint(p.checkpoint_path, expect));
  }
  at::Tensor centroids;
  if (resume) {
    centroids = resume->centroids.to(rows.device());
    result.resumed_after = resume->iterations_done;
  } else {
    MLCD_ASSIGN_OR_RETURN(centroids, InitialCentroids(sample, p.k, p.seed, comm));
  }
  const int iterations = sample.total == p.k ? 1 : p.niter;
  if (sample.total == p.k && !resume) {  // FAISS's copy case: one iteration that changes nothing
    GangKMeansIterationStats stats;
    stats.imbalance_factor = 1.0;
    result.iterations.push_back(stats);
    if (callbacks.on_iteration) callbacks.on_iteration(stats, centroids);
    result.centroids = centroids;
    return result;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = result.resumed_after; it < iterations; ++it) {
    if (callbacks.should_stop && callbacks.should_stop())
      return Status::Cancelled("k-means cancelled after " + std::to_string(it) + " iterations");
    MLCD_ASSIGN_OR_RETURN(GangKMeansIterationStats stats, Iterate(sample, p, comm, centroids));
    stats.iteration = it;
    stats.seconds = SecondsSince(t0);
    result.iterations.push_back(stats);
    if (callbacks.on_iteration) callbacks.on_iteration(stats, centroids);
    const bool last = it + 1 == iterations;
    if (!p.checkpoint_path.empty() && comm.rank() == 0 &&
        ((it + 1) % p.checkpoint_every == 0 || last)) {
      CentroidCheckpoint c = expect;
      c.iterations_done = it + 1;
      c.centroids = centroids;
      MLCD_RETURN_IF_ERROR(SaveCentroidCheckpoint(p.checkpoint_path, c));
    }
  }
  result.centroids = centroids;
  return result;
}

}  // namespace mlcd::worker::cluster
