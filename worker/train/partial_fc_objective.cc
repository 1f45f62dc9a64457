#include "worker/train/partial_fc_objective.h"

namespace mlcd::worker {

PartialFcObjective::PartialFcObjective(std::unique_ptr<PartialFc> layer)
    : layer_(std::move(layer)) {}

StatusOr<std::unique_ptr<PartialFcObjective>> PartialFcObjective::Create(
    const PartialFcOptions& options, Collectives* comm) {
  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<PartialFc> layer, PartialFc::Create(options, comm));
  return std::make_unique<PartialFcObjective>(std::move(layer));
}

torch::Device PartialFcObjective::input_device() const { return layer_->options().device; }

std::string PartialFcObjective::Describe() const {
  const ClassRange range = layer_->class_range();
  return "classes " + std::to_string(range.begin) + ".." + std::to_string(range.end) + " of " +
         std::to_string(layer_->options().num_classes);
}

StatusOr<ObjectiveStep> PartialFcObjective::ForwardBackward(const BackboneOutput& out,
                                                            const torch::Tensor& labels) {
  MLCD_ASSIGN_OR_RETURN(PartialFcStep fc, layer_->ForwardBackward(out.embeddings, labels));
  ObjectiveStep step;
  step.loss = fc.loss;
  step.grad_embeddings = std::move(fc.grad_embeddings);
  step.stats.loss = fc.stats.loss;
  step.stats.global_batch_size = fc.stats.global_batch_size;
  step.stats.mean_positive_cosine = fc.stats.mean_positive_cosine;
  step.stats.mean_negative_cosine = fc.stats.mean_negative_cosine;
  step.collective_seconds = fc.collective_seconds;
  step.compute_seconds = fc.compute_seconds;
  return step;
}

Status PartialFcObjective::OptimizerStep(double lr) { return layer_->OptimizerStep(lr); }

Status PartialFcObjective::MaskedOptimizerStep(double lr, const torch::Tensor& apply) {
  return layer_->OptimizerStep(lr, apply);
}

void PartialFcObjective::DiscardGradient() { layer_->DiscardGradient(); }

Status PartialFcObjective::Save(const std::string& dir) const { return layer_->Save(dir); }

Status PartialFcObjective::Load(const std::string& dir) { return layer_->Load(dir); }

std::vector<torch::Tensor> PartialFcObjective::Parameters() const { return {layer_->weight()}; }

}  // namespace mlcd::worker
