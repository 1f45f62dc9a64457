// The MLCD classification objective: the sharded PartialFc layer (worker/loss/partial_fc.h)
// behind the TrainObjective contract (worker/train/objective.h). It reads the embeddings and
// the labels; its class centres are sharded by class range (no replicated parameters: the
// layer's collectives run inside ForwardBackward), its optimizer is the layer's sparse AdamW,
// and Save/Load write and read this rank's class-centre range.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/loss/partial_fc.h"
#include "worker/train/objective.h"

namespace mlcd::worker {

class PartialFcObjective : public TrainObjective {
 public:
  explicit PartialFcObjective(std::unique_ptr<PartialFc> layer);
  // PartialFc::Create with `options` over `comm` (which must outlive the objective).
  static StatusOr<std::unique_ptr<PartialFcObjective>> Create(const PartialFcOptions& options,
                                                              Collectives* comm);

  ObjectiveFamily family() const override { return ObjectiveFamily::kClassification; }
  ObjectiveNeeds needs() const override { return {}; }
  // The layer's device: where the device layer keeps its shard, the host for the host layer.
  torch::Device input_device() const override;
  std::string Describe() const override;

  StatusOr<ObjectiveStep> ForwardBackward(const BackboneOutput& out,
                                          const torch::Tensor& labels) override;
  Status OptimizerStep(double lr) override;
  // The layer's own masking (PartialFc::OptimizerStep with `apply`): no read on the device
  // layer.
  Status MaskedOptimizerStep(double lr, const torch::Tensor& apply) override;
  void DiscardGradient() override;
  Status Save(const std::string& dir) const override;
  Status Load(const std::string& dir) override;
  std::vector<torch::Tensor> Parameters() const override;

  PartialFc& layer() { return *layer_; }
  const PartialFc& layer() const { return *layer_; }

 private:
  std::unique_ptr<PartialFc> layer_;
};

}  // namespace mlcd::worker
