// TrainObjective: what a training step optimises on top of the backbone. TrainStep
// (worker/train/train_step.h) runs the backbone and hands its output to one objective: the
// sharded PartialFC classification layer (worker/train/partial_fc_objective.h, the MLCD
// losses) or a contrastive loss with its projection head (worker/train/contrastive_objective.h);
// other heads plug in the same way.
//
// The contract, per step, on every rank of the gang in the same order (several calls are
// collectives):
//   1. needs()                     which backbone outputs the objective reads (fixed for its life)
//   2. ForwardBackward(out, labels) the objective's loss on this rank's rows of the global batch,
//                                  its own parameters' gradients (accumulated fresh: nothing of
//                                  an earlier call remains) and dL/d(each backbone output it
//                                  read). L is the global batch's loss: the backbone's gradients
//                                  are summed over the ranks afterwards, not averaged.
//   3. the backbone's backward with those gradients, its gradient all-reduce (sum), then
//      AllReduceGradients(): the objective's replicated parameters' gradients summed over the
//      ranks (a collective; a no-op for an objective whose state is sharded or absent). A
//      non-finite summed gradient is INVALID_ARGUMENT here, before anything was applied.
//   4. the backbone's optimizer step, then OptimizerStep(lr): the objective's own update
//      (MaskedOptimizerStep: only if the backbone's gradient was finite).
// After a failure anywhere between 2 and 4 the step calls DiscardGradient(): the next
// ForwardBackward starts clean and nothing pending is applied. Errors of bad input are the
// same on every rank (local checks are exchanged), so no rank waits in a collective alone.
//
// Tensors: the step puts the backbone outputs on input_device() (a copy when that is not the
// backbone's device) as float32, detached from the backbone's graph; the returned gradients are
// on that same device, float32, shaped as their outputs. Labels are host int32/int64
// [rows, l] (< 0 = padding), or undefined for an objective whose needs() says it reads none.
//
// Checkpoints (worker/train/checkpoint.h): every rank calls Save(dir) with the checkpoint's
// temporary directory and writes its part there (a sharded state its shard; a replicated one
// rank 0 only); Load(dir) on every rank restores the state a run of the same round saved, so a
// resumed run continues exactly. A checkpoint of an earlier round leaves the objective as
// created (a round's objective starts fresh, like its class centres).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

// The backbone outputs an objective reads.
struct ObjectiveNeeds {
  bool labels = true;         // per-sample labels (false: the step passes none)
  bool patch_tokens = false;  // the last block's patch tokens (BackboneOutput::patch_tokens)
};

// What the backbone produced for this rank's rows, on the objective's input_device().
struct BackboneOutput {
  torch::Tensor embeddings;    // float32 [rows, embed_dim]: the backbone's embedding
  torch::Tensor patch_tokens;  // float32 [rows, tokens, width] when needs().patch_tokens
};

// Per-step figures, the same on every rank. An objective fills the fields that apply to it;
// `family` tells the metrics which ones those are.
struct ObjectiveStats {
  double loss = 0;
  int64_t global_batch_size = 0;  // rows of the global batch the loss averages over
  // Classification (PartialFc): mean cosine of the positive and of the negative pairs.
  double mean_positive_cosine = 0;
  double mean_negative_cosine = 0;
  // Contrastive: mean number of positives per anchor, anchors that had none.
  double mean_positives = 0;
  int64_t anchors_without_positives = 0;
  // Further named figures an objective reports (progress events carry them as they are).
  std::vector<std::pair<std::string, double>> extra;
};

struct ObjectiveStep {
  double loss = 0;                  // = stats.loss
  torch::Tensor grad_embeddings;    // dL/d BackboneOutput::embeddings
  torch::Tensor grad_patch_tokens;  // dL/d BackboneOutput::patch_tokens (undefined if unread)
  ObjectiveStats stats;
  double collective_seconds = 0;  // wall time inside the objective's collectives (this rank)
  double compute_seconds = 0;     // the rest of ForwardBackward
};

// Which kind of objective: what the metrics and logs call its figures.
enum class ObjectiveFamily { kClassification, kContrastive, kHead };

class TrainObjective {
 public:
  virtual ~TrainObjective() = default;

  virtual ObjectiveFamily family() const = 0;
  virtual ObjectiveNeeds needs() const = 0;
  // Where ForwardBackward wants the backbone outputs.
  virtual torch::Device input_device() const = 0;
  // One line for the set-up log ("classes 0..40 of 40", "infonce, head 24-32-16").
  virtual std::string Describe() const = 0;

  // Step 2 of the contract above (a collective).
  virtual StatusOr<ObjectiveStep> ForwardBackward(const BackboneOutput& out,
                                                  const torch::Tensor& labels) = 0;
  // Step 3: sums the replicated parameters' gradients over the ranks (a collective).
  virtual Status AllReduceGradients() { return Status::Ok(); }
  // The factor the trainer applies to the backbone's and the objective's learning rates for
  // the next step: 1 unless the objective's own schedule says otherwise (MulCon's step 2).
  virtual double learning_rate_multiplier() const { return 1.0; }
  // Step 4: applies the pending gradient with learning rate `lr`. FAILED_PRECONDITION when no
  // gradient is pending. Local.
  virtual Status OptimizerStep(double lr) = 0;
  // Step 4 as TrainStep runs it: OptimizerStep(lr) where `apply` (a 0-dim bool tensor on the
  // backbone's device: its gradient was finite) is true, DiscardGradient() where it is false,
  // and nothing changed then. This default reads `apply` on the host (on a GPU, a wait for the
  // backbone's gradient); an objective whose update runs on that device masks it there
  // instead (PartialFcObjective with the device layer).
  virtual Status MaskedOptimizerStep(double lr, const torch::Tensor& apply) {
    if (apply.item<bool>()) return OptimizerStep(lr);
    DiscardGradient();
    return Status::Ok();
  }
  // Drops a pending gradient without applying it.
  virtual void DiscardGradient() = 0;

  virtual Status Save(const std::string& dir) const = 0;
  virtual Status Load(const std::string& dir) = 0;

  // The parameters this objective trains on this rank (a shard, or the whole replicated head).
  virtual std::vector<torch::Tensor> Parameters() const = 0;
};

}  // namespace mlcd::worker
