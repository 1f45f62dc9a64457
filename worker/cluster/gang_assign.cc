#include "worker/cluster/gang_assign.h"

#include <ATen/ATen.h>

#include <chrono>

namespace mlcd::worker::cluster {

StatusOr<GangAssignStats> AssignGangTopL(const at::Tensor& rows, int64_t first_row,
                                         const at::Tensor& centroids,
                                         const GangAssignParams& params, Collectives& comm,
                                         const GangLabelSink& sink) {
  const int64_t k = centroids.size(0);
  if (params.l < 1 || params.l > k) {
    return Status::InvalidArgument("l must be in [1, k = " + std::to_string(k) + "], got " +
                                   std::to_string(params.l));
  }
  if (centroids.dim() != 2 || centroids.size(1) != rows.size(1)) {
    return Status::InvalidArgument("centroids have dimension " +
                                   std::to_string(centroids.size(-1)) + " but the rows have " +
                                   std::to_string(rows.size(1)));
  }
  MLCD_RETURN_IF_ERROR(ValidateSearchOptions(params.search, rows));
  const auto t0 = std::chrono::steady_clock::now();
  at::Tensor top1 = at::zeros({k}, rows.options().dtype(at::kLong));
  labelstore::LabelBatch batch;
  batch.labels_per_sample = params.l;
  MLCD_RETURN_IF_ERROR(SearchTopL(
      rows, centroids, params.l, params.search,
      [&](int64_t b, const at::Tensor& scores, const at::Tensor& labels) -> Status {
        top1.index_add_(0, labels.select(1, 0), at::ones({labels.size(0)}, top1.options()));
        if (!sink) return Status::Ok();
        const int64_t n = labels.size(0);
        at::Tensor l32 = labels.to(at::kCPU, at::kInt).contiguous();
        at::Tensor s32 = scores.to(at::kCPU, at::kFloat).contiguous();
        batch.labels.assign(l32.data_ptr<int32_t>(), l32.data_ptr<int32_t>() + n * params.l);
        batch.scores.assign(s32.data_ptr<float>(), s32.data_ptr<float>() + n * params.l);
        batch.sample_ids.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) batch.sample_ids[i] = static_cast<uint64_t>(first_row + b + i);
        return sink(first_row + b, batch);
      }));
  GangAssignStats stats;
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  at::Tensor meta = at::full({1}, rows.size(0), top1.options());
  at::Tensor both = at::cat({top1, meta});
  MLCD_RETURN_IF_ERROR(comm.AllReduce(both, ReduceOp::kSum));
  both = both.to(at::kCPU).contiguous();
  stats.top1_sizes.assign(both.data_ptr<int64_t>(), both.data_ptr<int64_t>() + k);
  stats.rows = both.data_ptr<int64_t>()[k];
  return stats;
}

}  // namespace mlcd::worker::cluster
