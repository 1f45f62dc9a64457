// The contrastive objective: SimCLR's InfoNCE, SupCon ("all" / "any") or MulSupCon
// (worker/loss/contrastive_loss.h) over the gathered global batch, on the output of a
// projection head, behind the TrainObjective contract (worker/train/objective.h).
//
// Rows: the step's rows are views, two per image, interleaved (rows 2k and 2k+1 of a rank are
// image k's two augmented views; worker/train/dataset.h BatchLoaderOptions::views), and the
// labels are per row (the image's labels repeated for each view). infonce reads no labels.
//
// The projection head (SimCLR's g(.)): z = W2 · relu(W1 · e + b1) + b2 on the embedding e,
// replicated on every rank (worker/train/replicated_head.h: its gradient summed over the
// ranks after the backbone's, AdamW over it with the backbone's learning rate and settings,
// its weights and moments in the checkpoint). It is training-only: the exported backbone is
// the embedding, without it. projection_dim 0 = no head (the loss reads the embedding).
// Its weights start as PyTorch's Linear default (uniform in ±1/sqrt(fan_in), weights and
// biases) drawn from a generator seeded by `seed`, the same at every world size.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/loss/contrastive_loss.h"
#include "worker/train/objective.h"
#include "worker/train/replicated_head.h"

namespace mlcd::worker {

struct ContrastiveObjectiveOptions {
  ContrastiveOptions loss;            // variant, τ, views (2)
  int64_t embedding_dim = 0;          // the backbone's embed_dim
  int64_t projection_hidden_dim = 0;  // the head's hidden width (> 0 with a head)
  int64_t projection_dim = 0;         // the head's output; 0 = no head
  uint64_t seed = 0;                  // the head's initial weights
  // AdamW of the head: betas, eps, weight_decay {weights, biases}, clipping of its own norm.
  BackboneAdamWOptions adamw;
  torch::Device device = torch::Device(torch::kCPU);  // the backbone's device
};

// INVALID_ARGUMENT naming the field: ValidateContrastiveOptions, embedding_dim < 1, a head
// size < 0, or a projection_dim without a hidden width.
Status ValidateContrastiveObjectiveOptions(const ContrastiveObjectiveOptions& options);

class ContrastiveObjective : public TrainObjective {
 public:
  // Builds the head (on options.device) and makes every rank's weights rank 0's (a
  // collective). `comm` must outlive the objective.
  static StatusOr<std::unique_ptr<ContrastiveObjective>> Create(
      const ContrastiveObjectiveOptions& options, Collectives* comm);

  ObjectiveFamily family() const override { return ObjectiveFamily::kContrastive; }
  ObjectiveNeeds needs() const override;
  torch::Device input_device() const override { return options_.device; }
  std::string Describe() const override;

  StatusOr<ObjectiveStep> ForwardBackward(const BackboneOutput& out,
                                          const torch::Tensor& labels) override;
  Status AllReduceGradients() override;
  // AdamW on the head's summed gradient (nothing to update without a head).
  Status OptimizerStep(double lr) override;
  void DiscardGradient() override;
  // The head's files (rank 0; replicated_head.h); nothing without a head.
  Status Save(const std::string& dir) const override;
  Status Load(const std::string& dir) override;
  std::vector<torch::Tensor> Parameters() const override;

  const ContrastiveObjectiveOptions& options() const { return options_; }
  // The projection head (null when projection_dim is 0).
  ReplicatedHead* head() { return head_.get(); }

 private:
  ContrastiveObjective(ContrastiveObjectiveOptions options, Collectives* comm);

  ContrastiveObjectiveOptions options_;
  Collectives* comm_;
  torch::nn::Sequential module_{nullptr};
  std::unique_ptr<ReplicatedHead> head_;
  bool pending_ = false;
};

}  // namespace mlcd::worker
