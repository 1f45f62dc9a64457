#include "worker/cluster/nearest.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

namespace mlcd::worker::cluster {
namespace {

// The chunk's scores: float32, or with bf16 the GEMM's bfloat16 output as it is. The row
// maximum and the top-l are taken on the bfloat16 block and only their values widened (exact
// and order-preserving, so the picks are those of the widened block): widening the whole
// block first tripled the memory traffic of a k-means iteration on an H200
// (bench/RESULTS.md, "Gang k-means on the GPU").
at::Tensor Scores(const at::Tensor& chunk, const at::Tensor& centroids_t, bool bf16) {
  if (!bf16) return at::mm(chunk, centroids_t);
  return at::mm(chunk.to(at::kBFloat16), centroids_t);
}

// Rows per chunk on the rows' device: the workspace's, and on the CPU no more than a cache-sized
// score block (nearest.h, kCpuScoreBlockBytes).
int64_t StepRows(const SearchOptions& options, const at::Tensor& rows, int64_t k) {
  const int64_t step = ChunkRows(options.workspace_bytes, k);
  return rows.is_cuda() ? step : std::min(step, ChunkRows(kCpuScoreBlockBytes, k));
}

// First j with row[j] == value, or 0 when there is none (value NaN). Whole blocks of
// kScanBlock are tested with a branch-free OR (vectorised), then the block that holds the value
// is scanned: a plain early-exit scan ran at ~2.5 cycles a column, as long as the GEMM's
// writes at d = 128.
constexpr int64_t kScanBlock = 64;
int64_t FirstEqual(const float* row, int64_t k, float value) {
  int64_t j = 0;
  for (; j + kScanBlock <= k; j += kScanBlock) {
    int hit = 0;
    for (int64_t t = 0; t < kScanBlock; ++t) hit |= row[j + t] == value;
    if (hit) break;
  }
  while (j < k && row[j] != value) ++j;
  return j < k ? j : 0;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> RowMax(const at::Tensor& scores) {
  if (scores.is_cuda()) return at::max(scores, 1);
  at::Tensor s = scores.contiguous();
  at::Tensor best = at::amax(s, 1);
  at::Tensor index = at::empty({s.size(0)}, s.options().dtype(at::kLong));
  const int64_t k = s.size(1);
  const float* sp = s.data_ptr<float>();
  const float* bp = best.data_ptr<float>();
  int64_t* ip = index.data_ptr<int64_t>();
  at::parallel_for(0, s.size(0), 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) ip[r] = FirstEqual(sp + r * k, k, bp[r]);
  });
  return {best, index};
}

int64_t ChunkRows(int64_t workspace_bytes, int64_t k) {
  return std::max<int64_t>(1, workspace_bytes / (std::max<int64_t>(k, 1) * 4));
}

Status ValidateSearchOptions(const SearchOptions& options, const at::Tensor& rows) {
  if (options.workspace_bytes < 4)
    return Status::InvalidArgument("search workspace must be at least 4 bytes, got " +
                                   std::to_string(options.workspace_bytes));
  if (options.bf16 && !rows.is_cuda())
    return Status::InvalidArgument(
        "bf16 assignment is for CUDA devices only; the CPU path is float32 (turn bf16 off)");
  return Status::Ok();
}

double AccumulateNearest(const at::Tensor& rows, const at::Tensor& centroids,
                         const SearchOptions& options, at::Tensor& sums, at::Tensor& counts) {
  const int64_t n = rows.size(0), k = centroids.size(0);
  const int64_t step = StepRows(options, rows, k);
  at::Tensor centroids_t =
      options.bf16 ? centroids.to(at::kBFloat16).t() : centroids.t();
  at::Tensor objective = at::zeros({}, rows.options().dtype(at::kDouble));
  for (int64_t b = 0; b < n; b += step) {
    at::Tensor chunk = rows.narrow(0, b, std::min(step, n - b));
    auto [best, index] = RowMax(Scores(chunk, centroids_t, options.bf16));
    objective += best.sum(at::kDouble);  // bf16 values widen exactly
    sums.index_add_(0, index, chunk.to(sums.scalar_type()));
    counts.index_add_(0, index, at::ones({chunk.size(0)}, counts.options()));
  }
  return objective.item<double>();
}

Status SearchTopL(const at::Tensor& rows, const at::Tensor& centroids, int l,
                  const SearchOptions& options,
                  const std::function<Status(int64_t, const at::Tensor&, const at::Tensor&)>& sink) {
  const int64_t n = rows.size(0), k = centroids.size(0);
  const int64_t step = StepRows(options, rows, k);
  at::Tensor centroids_t =
      options.bf16 ? centroids.to(at::kBFloat16).t() : centroids.t();
  for (int64_t b = 0; b < n; b += step) {
    at::Tensor chunk = rows.narrow(0, b, std::min(step, n - b));
    auto [scores, labels] = at::topk(Scores(chunk, centroids_t, options.bf16), l, 1,
                                     /*largest=*/true, /*sorted=*/true);
    MLCD_RETURN_IF_ERROR(sink(b, scores.to(at::kFloat), labels));
  }
  return Status::Ok();
}

}  // namespace mlcd::worker::cluster
