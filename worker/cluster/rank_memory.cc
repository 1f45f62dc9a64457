#include "worker/cluster/rank_memory.h"

#include <algorithm>

#include "common/format.h"
#include "common/host_memory.h"

#ifdef MLCD_WITH_NCCL  // the CUDA build (worker/CMakeLists.txt)
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace mlcd::worker::cluster {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t CudaFreeBytes(const at::Device& device) {
#ifdef MLCD_WITH_NCCL
  c10::cuda::CUDAGuard guard(device.has_index() ? device.index() : 0);
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return -1;
  return static_cast<int64_t>(free_bytes);
#else
  (void)device;
  return -1;
#endif
}

int64_t SampleRows(const RankMemoryPlan& p) {
  return std::min(p.total_rows, p.k * p.max_points_per_centroid);
}

}  // namespace

RankMemoryNeed EstimateRankMemory(const RankMemoryPlan& p, const at::Device& device) {
  const int world = std::max(1, p.world);
  const bool cuda = device.is_cuda();
  RankMemoryNeed n;
  n.rows = CeilDiv(p.total_rows, world) * p.d * 4;
  const int64_t sample = SampleRows(p);
  n.sample = sample < p.total_rows ? CeilDiv(sample, world) * p.d * 4 : 0;
  // Centroids and the new means (float32), the sums and counts with the objective (float32 on
  // CUDA, float64 on the CPU), and the bf16 copy the GEMM reads.
  const int64_t acc = cuda ? 4 : 8;
  n.centroids = 2 * p.k * p.d * 4 + (p.k * p.d + p.k + 1) * acc +
                (p.search.bf16 ? p.k * p.d * 2 : 0);
  // One chunk's scores (bounded by the workspace; on the CPU by kCpuScoreBlockBytes too), and
  // the chunk's rows converted: to bf16 for the GEMM on CUDA, to float64 for the sums on the
  // CPU.
  const int64_t step_bytes =
      cuda ? p.search.workspace_bytes : std::min(p.search.workspace_bytes, kCpuScoreBlockBytes);
  const int64_t chunk_rows = ChunkRows(step_bytes, p.k);
  n.chunk = std::min(step_bytes, chunk_rows * p.k * 4) +
            chunk_rows * p.d * (cuda ? (p.search.bf16 ? 2 : 0) : 8);
  return n;
}

int64_t FreeBytes(const at::Device& device) {
  return device.is_cuda() ? CudaFreeBytes(device) : HostBytesAvailable();
}

Status CheckNeedFits(const RankMemoryPlan& p, const RankMemoryNeed& need, int64_t free_bytes,
                     const std::string& where) {
  if (free_bytes < 0 || need.Total() <= free_bytes) return Status::Ok();
  const int64_t fixed = need.centroids + need.chunk;
  std::string fit = "no world size fits: the centroids and one search chunk alone need " +
                    FormatBytes(static_cast<uint64_t>(fixed)) + "; lower clustering.k";
  if (fixed < free_bytes) {
    // The rows and the sample shrink with the world size; the rest does not.
    const int64_t shared = (need.rows + need.sample) * std::max(1, p.world);
    fit = "a world size of " + std::to_string(CeilDiv(shared, free_bytes - fixed)) +
          " would fit (training.world_size), or lower clustering.k";
  }
  return Status::ResourceExhausted(
      "the gang's clustering needs " + FormatBytes(static_cast<uint64_t>(need.Total())) +
      " on " + where + " for each of " + std::to_string(std::max(1, p.world)) + " ranks (rows " +
      FormatBytes(static_cast<uint64_t>(need.rows)) + " = " +
      std::to_string(CeilDiv(p.total_rows, std::max(1, p.world))) + " x d " +
      std::to_string(p.d) + " float32; training sample copy " +
      FormatBytes(static_cast<uint64_t>(need.sample)) + "; " + std::to_string(p.k) +
      " centroids with accumulators " + FormatBytes(static_cast<uint64_t>(need.centroids)) +
      "; one search chunk " + FormatBytes(static_cast<uint64_t>(need.chunk)) + ") but " + where +
      " has " + FormatBytes(static_cast<uint64_t>(free_bytes)) + " free; " + fit);
}

Status CheckRankMemory(const RankMemoryPlan& plan, const at::Device& device) {
  const RankMemoryNeed need = EstimateRankMemory(plan, device);
  MLCD_RETURN_IF_ERROR(CheckNeedFits(plan, need, FreeBytes(device), device.is_cuda() ? device.str() : "this host"));
  if (!device.is_cuda()) return Status::Ok();
  // The rows pass through the host on their way to the device.
  RankMemoryNeed staging;
  staging.rows = need.rows;
  return CheckNeedFits(plan, staging, FreeBytes(at::Device(at::kCPU)), "this host (staging)");
}

}  // namespace mlcd::worker::cluster
