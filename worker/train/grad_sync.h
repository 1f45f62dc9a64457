// Data-parallel synchronisation of the backbone (libtorch's C++ API has no DDP): the
// gradient buffer of FlatParameters is summed over the ranks in buckets -- contiguous slices
// of the buffer, one c10d allreduce each, in place, no packing copies -- and the initial
// weights are broadcast from rank 0 so every rank starts identical.
//
// Overlap (GradSyncOptions::overlap, on by default): a post hook on each parameter's
// gradient accumulator counts the bucket's parameters whose gradient the backward has
// written; a complete bucket's allreduce starts at once (Collectives::AllReduceAsync) while
// the backward goes on, as DDP does. Buckets start in one fixed order, the same on every rank
// (c10d matches collectives by order): by the position in the forward of their earliest
// parameter, latest first, which is the order the backward completes them in. A bucket that
// is complete before its predecessors waits for them. AllReduceGradients() starts whatever the
// backward did not complete and waits for all.
//
//   grad_sync.BeginBackward();  loss.backward();  MLCD_RETURN_IF_ERROR(grad_sync.AllReduceGradients());
//
// The sum (not the mean) is what the MLCD layer needs: PartialFc's loss is already the mean
// over the global batch, so each rank's backbone gradient is its share of dL/dθ.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/dist/collectives.h"
#include "worker/train/backbone_optimizer.h"

namespace mlcd::worker {

struct GradSyncOptions {
  // Bytes per allreduce (the last bucket may be smaller).
  int64_t bucket_bytes = 25 << 20;
  // Start each bucket's allreduce during the backward, as soon as its gradients are written.
  bool overlap = true;
  // Per parameter of the FlatParameters, in its order: the parameter's position in the
  // model's forward (e.g. its index in Module::parameters()). Empty: the FlatParameters order.
  // Only the overlap depends on it: any order gives the same sums.
  std::vector<int64_t> forward_position;
};

// GradSyncOptions::forward_position for `flat`'s parameters: each one's index in
// model.parameters() (the order the forward uses them in, as modules register them).
std::vector<int64_t> ForwardPositions(const torch::nn::Module& model, const FlatParameters& flat);

class GradSync {
 public:
  struct Buckets;  // the buckets, their launch order and the hooks' state (grad_sync.cc only)

  // `comm` and `params` must outlive this object. With overlap at world size > 1, registers
  // the hooks on the parameters' gradient accumulators.
  GradSync(Collectives* comm, FlatParameters* params, GradSyncOptions options = {});
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Arms the hooks for the next backward (call after zeroing the gradients, before the
  // backward); without it the backward starts no collective.
  void BeginBackward();
  // Sums params->grads() over all ranks, in place: starts the buckets the backward did not,
  // then waits for every bucket. A no-op at world size 1.
  Status AllReduceGradients();
  // Buckets of the last AllReduceGradients() that the backward had started.
  int started_during_backward() const;
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
  std::shared_ptr<Buckets> buckets_;  // the hooks hold it weakly
  double last_seconds_ = 0;
};

}  // namespace mlcd::worker
