// ReplicatedHead: a small module that trains with the backbone on every rank of the gang (the
// contrastive projection head; a classifier head of an objective): the same weights on every
// rank, its gradient summed over the ranks like the backbone's, AdamW over it, and its state in
// the checkpoint, so a resumed run continues exactly. Objectives (worker/train/objective.h)
// own one and forward the contract's calls to it.
//
// The module's parameters are moved into one FlatParameters buffer (weight matrices -- every
// parameter with two or more dimensions -- in the decayed group, the rest not decayed) and
// stepped by BackboneAdamW, clipped by the head's own gradient norm (options.adamw). Per step:
//   ZeroGrad();  <forward through module(), backward into its parameters>;
//   AllReduceGradients();   // a collective: the sum over the ranks, INVALID_ARGUMENT if not finite
//   Step(lr);               // local
// Checkpoints: rank 0 writes, into the checkpoint's directory,
//   <name>.json            parameter names, shapes, offsets; the optimizer step (the form of
//                          backbone.json, worker/train/checkpoint_index.h)
//   <name>.weights.npy     float32 [P]   <name>.exp_avg.npy, <name>.exp_avg_sq.npy: AdamW's moments
// and every rank reads them back by parameter name (INVALID_ARGUMENT when a name or a shape
// differs: the head was built with other sizes).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/dist/collectives.h"
#include "worker/train/backbone_optimizer.h"

namespace mlcd::worker {

struct ReplicatedHeadOptions {
  // The file prefix in checkpoints ("projection_head"); letters, digits and '_' only.
  std::string name;
  // weight_decay: {decayed group, other group}.
  BackboneAdamWOptions adamw;
};

class ReplicatedHead {
 public:
  // `module`'s parameters must live on `comm`'s device (or the host, at world size 1) and be
  // float32. `comm` must outlive the head.
  ReplicatedHead(std::shared_ptr<torch::nn::Module> module, Collectives* comm,
                 ReplicatedHeadOptions options);

  // Makes every rank's weights rank 0's (a collective).
  Status BroadcastParameters();
  void ZeroGrad() { flat_->ZeroGrad(); }
  // Sums the gradient over the ranks (a collective; nothing at world size 1), then
  // INVALID_ARGUMENT naming the head when the sum is not finite (the same on every rank).
  Status AllReduceGradients();
  // AdamW with learning rate `lr` on the summed gradient.
  StatusOr<BackboneStepStats> Step(double lr);

  Status Save(const std::string& dir) const;
  Status Load(const std::string& dir);

  torch::nn::Module& module() { return *module_; }
  std::vector<torch::Tensor> Parameters() const { return flat_->parameters(); }
  FlatParameters& flat() { return *flat_; }
  const BackboneAdamW& optimizer() const { return *optimizer_; }
  const std::string& name() const { return options_.name; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  Collectives* comm_;
  ReplicatedHeadOptions options_;
  std::unique_ptr<FlatParameters> flat_;
  std::unique_ptr<BackboneAdamW> optimizer_;
};

}  // namespace mlcd::worker
