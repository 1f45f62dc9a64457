// The label heads behind the TrainObjective contract (worker/train/objective.h): `bce` (a
// linear head on the embedding, worker/loss/bce_head.h) and `mulcon` (the label-attention head
// on the patch tokens, worker/model/label_attention_head.h, with BCE and the label-level
// contrastive loss, worker/loss/llcl.h). docs/loss.md, "Label heads".
//
// The head is replicated: every rank holds the same parameters (seeded init), computes the
// loss of its rows of the global batch (the BCE's normalisation and the LLCL's gathering are
// collectives inside ForwardBackward), and AllReduceGradients sums the head's gradients over
// the ranks; its optimizer is AdamW (torch::optim::AdamW) over the head's parameters.
//
// MulCon's two steps in one job: the objective counts its optimizer steps; while fewer than
// `pretrain_steps` have been taken the loss is BCE alone (step 1), after that BCE + γ·LLCL
// (step 2), and lr_multiplier() is `contrastive_lr_multiplier`, which the trainer applies to
// the backbone's and the head's learning rates alike.
//
// Checkpoint (rank 0 writes, every rank reads): label_head.safetensors (the head's tensors
// under their export names, docs/export.md, with the step count in the metadata) and
// label_head.optimizer.pt (the AdamW state, torch::save).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/enums.h"
#include "worker/dist/collectives.h"
#include "worker/loss/bce_head.h"
#include "worker/model/label_attention_head.h"
#include "worker/train/objective.h"

namespace mlcd::worker {

struct LabelHeadObjectiveOptions {
  LabelHeadVariant variant = LabelHeadVariant::kBce;
  int64_t num_classes = 0;    // K (= L for mulcon), >= 1
  int64_t embedding_dim = 0;  // bce: the backbone's embedding size
  // mulcon: token_dim (the backbone's width), label_dim, heads, projection_dim; num_labels is
  // num_classes.
  LabelAttentionOptions head;
  double temperature = 0.2;                // mulcon: τ of the LLCL
  double llcl_weight = 0.1;                // mulcon: γ
  int64_t pretrain_steps = 0;              // mulcon: optimizer steps of step 1 (BCE alone)
  double contrastive_lr_multiplier = 0.1;  // mulcon: step 2's learning-rate factor
  double weight_decay = 0.0;               // AdamW of the head
  double beta1 = 0.9, beta2 = 0.999;
  uint64_t seed = 0;  // the head's initialisation
  // Where the head, its optimizer state and its inputs live: the step's device, so the
  // backbone's outputs reach it without a copy.
  torch::Device device{torch::kCPU};
};

class LabelHeadObjective : public TrainObjective {
 public:
  // INVALID_ARGUMENT naming the field for bad options; `comm` must outlive the objective.
  static StatusOr<std::unique_ptr<LabelHeadObjective>> Create(
      const LabelHeadObjectiveOptions& options, Collectives* comm);

  ObjectiveFamily family() const override { return ObjectiveFamily::kHead; }
  ObjectiveNeeds needs() const override;
  torch::Device input_device() const override { return options_.device; }
  std::string Describe() const override;

  StatusOr<ObjectiveStep> ForwardBackward(const BackboneOutput& out,
                                          const torch::Tensor& labels) override;
  Status AllReduceGradients() override;
  Status OptimizerStep(double lr) override;
  void DiscardGradient() override;
  Status Save(const std::string& dir) const override;
  Status Load(const std::string& dir) override;
  std::vector<torch::Tensor> Parameters() const override;

  // Whether the next step is MulCon's step 2 (BCE + γ·LLCL); false for bce.
  bool contrastive() const;
  // contrastive_lr_multiplier in MulCon's step 2, else 1.
  double learning_rate_multiplier() const override;
  int64_t step_count() const { return steps_; }
  torch::nn::Module& head() const { return *module_; }

 private:
  LabelHeadObjective(const LabelHeadObjectiveOptions& options, Collectives* comm);

  LabelHeadObjectiveOptions options_;
  Collectives* comm_;
  BceHead bce_{nullptr};
  LabelAttentionHead mulcon_{nullptr};
  std::shared_ptr<torch::nn::Module> module_;  // the one of the two in use
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  int64_t steps_ = 0;
  bool pending_ = false;
};

}  // namespace mlcd::worker
