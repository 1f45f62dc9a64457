// Searching rows against all centroids on the rows' device, chunked so that the score matrix
// of one chunk (chunk rows x k floats) stays within a workspace budget: the nearest centroid
// of each row (k-means iterations, with per-cluster sums and counts) and the top-l centroids
// of each row (assignment). Rows and centroids have unit norm, so "nearest" is the largest
// inner product. On CUDA the GEMM may run in bfloat16 (scores rounded to ~3 significant
// digits; the sums stay float32); on the CPU it is always float32.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <tuple>

#include "common/status.h"

namespace mlcd::worker::cluster {

// Bytes of score workspace per chunk when the caller does not say.
constexpr int64_t kDefaultWorkspaceBytes = int64_t{512} << 20;

// On the CPU a chunk's score matrix is also kept within this many bytes, whatever the
// workspace: a score block that stays in the caches while the GEMM writes it and the row
// maximum reads it runs the GEMM ~2x faster than one streamed through memory (d = 128,
// k = 4096, 1 thread: 132 GFLOP/s with 8 MiB blocks, 51 GFLOP/s with the 512 MiB default;
// bench/RESULTS.md "Gang k-means on the CPU").
constexpr int64_t kCpuScoreBlockBytes = int64_t{8} << 20;

struct SearchOptions {
  // Upper bound on one chunk's score matrix, chunk_rows x k x 4 bytes.
  int64_t workspace_bytes = kDefaultWorkspaceBytes;
  // bfloat16 GEMM (CUDA only; INVALID_ARGUMENT on the CPU).
  bool bf16 = false;
};

// Rows per chunk for k centroids under `workspace_bytes` (at least 1). The search uses
// ChunkRows(min(workspace, kCpuScoreBlockBytes), k) on the CPU.
int64_t ChunkRows(int64_t workspace_bytes, int64_t k);

// Row-wise largest score of a float32 chunk x k score matrix and the first column holding it
// (FAISS's top-1 keeps the first of equal scores): (best float32, index int64), chunk each.
// On the CPU at::amax (vectorised) and a scan for the first column equal to it, ~2x faster
// than at::max(scores, 1) there; a row whose maximum is NaN gets column 0 and a NaN score.
// Elsewhere at::max.
std::tuple<at::Tensor, at::Tensor> RowMax(const at::Tensor& scores);

// Checks options against the rows' device.
Status ValidateSearchOptions(const SearchOptions& options, const at::Tensor& rows);

// Adds each row to the sum of its nearest centroid: sums[c] += row, counts[c] += 1, and
// returns the sum over rows of the largest inner product (FAISS's k-means objective). sums is
// k x d and counts k, both of the accumulation dtype (float32 or float64), on the rows'
// device.
double AccumulateNearest(const at::Tensor& rows, const at::Tensor& centroids,
                         const SearchOptions& options, at::Tensor& sums, at::Tensor& counts);

// Top-l of every row, chunk by chunk: `sink(first, scores, labels)` receives rows
// [first, first + chunk) of `rows` with their scores (float32, chunk x l, best first) and
// centroid ids (int64, chunk x l), on the rows' device. A non-OK sink status stops the pass.
Status SearchTopL(const at::Tensor& rows, const at::Tensor& centroids, int l,
                  const SearchOptions& options,
                  const std::function<Status(int64_t, const at::Tensor&, const at::Tensor&)>& sink);

}  // namespace mlcd::worker::cluster
