// What one gang rank holds while it clusters or assigns (gang_phase.h), against what is free
// where it holds it, so that a phase that cannot fit fails before it loads a row or joins a
// collective, naming the bytes, what is free and the world size that would fit, rather than
// at an allocation in the middle of an iteration.
//
// On the CPU everything is host memory. On a CUDA device the rows, the sample, the centroids
// and the search chunk are on the device, and the rank's rows pass through the host once on
// their way there (FeatureRows::Read), so both are checked.
//
//   RankMemoryPlan plan{rows, world, d, k, max_points_per_centroid, search};
//   MLCD_RETURN_IF_ERROR(CheckRankMemory(plan, device));
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "worker/cluster/nearest.h"

namespace mlcd::worker::cluster {

struct RankMemoryPlan {
  int64_t total_rows = 0;  // feature rows over the whole gang
  int world = 1;
  int64_t d = 0;
  int64_t k = 0;
  // The training sample is min(rows, k x this) rows (FAISS's rule); a rank copies its share
  // when it is smaller than all rows.
  int64_t max_points_per_centroid = 256;
  SearchOptions search;
};

// One rank's bytes, by what holds them.
struct RankMemoryNeed {
  int64_t rows = 0;       // its contiguous share of the rows, float32
  int64_t sample = 0;     // its copy of its share of the training sample (0: the rows are it)
  int64_t centroids = 0;  // centroids, their update, the accumulators (and a bf16 copy)
  int64_t chunk = 0;      // one search chunk: the score block and the chunk's converted rows
  int64_t Total() const { return rows + sample + centroids + chunk; }
};

// The need on `device` ("cpu" or a CUDA device) for `plan`.
RankMemoryNeed EstimateRankMemory(const RankMemoryPlan& plan, const at::Device& device);

// Bytes free for this process: on the host, HostBytesAvailable() (common/host_memory.h:
// MemAvailable, lowered to what a cgroup v2 limit leaves); on a CUDA device, cudaMemGetInfo's
// free bytes (-1 in a build without CUDA). -1 when it cannot be read, which the check takes
// as "unknown" and lets pass.
int64_t FreeBytes(const at::Device& device);

// RESOURCE_EXHAUSTED when `need` is above `free_bytes` on `where` ("this host", "cuda:0"),
// with the parts, what is free and the smallest world size whose share would fit (or that
// none does, when the centroids and one chunk alone are too big). OK when free_bytes < 0.
Status CheckNeedFits(const RankMemoryPlan& plan, const RankMemoryNeed& need, int64_t free_bytes,
                     const std::string& where);

// EstimateRankMemory + FreeBytes + CheckNeedFits for the device, and on a CUDA device also
// the host's staging copy of the rows.
Status CheckRankMemory(const RankMemoryPlan& plan, const at::Device& device);

}  // namespace mlcd::worker::cluster
