// The centroids of a gang k-means run after some iterations, in one file written atomically
// (temp, fsync, rename) by rank 0, so that a retried attempt resumes where the last
// checkpoint left off. The file names the run it belongs to (k, d, seed, training rows);
// resuming from a checkpoint of another run is refused, never silently mixed.
//
// Layout: "MLCDKMC1", int32 k, int32 d, int32 iterations done, int32 0, uint64 seed, int64
// training rows, then k x d float32 row-major (little-endian, as every supported machine).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace mlcd::worker::cluster {

struct CentroidCheckpoint {
  int k = 0;
  int d = 0;
  int iterations_done = 0;
  uint64_t seed = 0;
  int64_t train_rows = 0;
  at::Tensor centroids;  // k x d float32, CPU
};

Status SaveCentroidCheckpoint(const std::string& path, const CentroidCheckpoint& checkpoint);

// nullopt when there is no file at `path`; INVALID_ARGUMENT naming the field when the file is
// damaged; FAILED_PRECONDITION when it belongs to another run than `expect` (whose
// iterations_done and centroids are ignored).
StatusOr<std::optional<CentroidCheckpoint>> LoadCentroidCheckpoint(
    const std::string& path, const CentroidCheckpoint& expect);

}  // namespace mlcd::worker::cluster
