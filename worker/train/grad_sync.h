// Data-parallel synchronisation of the backbone (libtorch's C++ API has no DDP): the
// gradient buffer of FlatParameters is summed over the ranks in buckets -- contiguous slices
// of the buffer, one c10d allreduce each, in place, no packing copies -- and the initial
// weights are broadcast from rank 0 so every rank starts identical.
//
// The sum (not the mean) is what the MLCD layer needs: PartialFc's loss is already the mean
// over the global batch, so each rank's backbone gradient is its share of dL/dθ.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "worker/dist/collectives.h"
#include "worker/train/backbone_optimizer.h"

namespace mlcd::worker {

struct GradSyncOptions {
  // Bytes per allreduce (the last bucket may be smaller).
  int64_t bucket_bytes = 25 << 20;
};

class GradSync {
 public:
  // `comm` and `params` must outlive this object.
  GradSync(Collectives* comm, FlatParameters* params, GradSyncOptions options = {});

  // Sums params->grads() over all ranks, in place. A no-op at world size 1.
  Status AllReduceGradients();
  // Makes every rank's parameters equal to rank 0's.
  Status BroadcastParameters();
  // Every rank's parameters must already be equal (after a broadcast or a checkpoint
  // load); FAILED_PRECONDITION otherwise (a max-abs-difference check, one small collective).
  Status CheckParametersInSync();

  int num_buckets() const;
  double last_seconds() const { return last_seconds_; }

 private:
  Collectives* comm_;
  FlatParameters* params_;
  GradSyncOptions options_;
  double last_seconds_ = 0;
};

}  // namespace mlcd::worker
