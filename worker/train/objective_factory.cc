#include "worker/train/objective_factory.h"

#include "worker/train/label_head_spec.h"
#include "worker/train/partial_fc_objective.h"
#include "worker/train/round_layer.h"
#include "worker/train/sample_order.h"

namespace mlcd::worker {

namespace {

bool IsContrastive(const v1::JobSpec& spec) {
  auto family = LossFamilyOf(spec.loss().variant());
  return family.ok() && *family == LossFamily::kContrastive;
}

}  // namespace

bool NeedsLabels(const v1::JobSpec& spec) {
  return spec.loss().variant() != ContrastiveVariantName(ContrastiveVariant::kInfoNce);
}

int ViewsPerImage(const v1::JobSpec& spec) {
  return IsContrastive(spec) ? ContrastiveOptions().views : 1;
}

StatusOr<ContrastiveObjectiveOptions> ContrastiveOptionsFromSpec(const v1::JobSpec& spec,
                                                                 int64_t embedding_dim, int round,
                                                                 const torch::Device& device) {
  ContrastiveObjectiveOptions o;
  MLCD_ASSIGN_OR_RETURN(o.loss.variant, ParseContrastiveVariant(spec.loss().variant()));
  o.loss.temperature = spec.loss().temperature();
  o.embedding_dim = embedding_dim;
  o.projection_dim = spec.loss().projection_dim();
  o.projection_hidden_dim = spec.loss().projection_hidden_dim();
  o.seed = HashValues(
      {spec.training().seed(), 0x50524F4Aull /* "PROJ" */, static_cast<uint64_t>(round)});
  const auto& opt = spec.optimizer();
  o.adamw.beta1 = opt.beta1();
  o.adamw.beta2 = opt.beta2();
  o.adamw.weight_decay = {opt.weight_decay(), 0.0};
  o.adamw.grad_clip_norm = opt.grad_clip_norm();
  o.device = device;
  return o;
}

StatusOr<std::unique_ptr<TrainObjective>> ObjectiveFromSpec(const v1::JobSpec& spec,
                                                            const ObjectiveContext& context) {
  MLCD_ASSIGN_OR_RETURN(const LossFamily family, LossFamilyOf(spec.loss().variant()));
  const int64_t embedding_dim = context.vit.embed_dim;
  switch (family) {
    case LossFamily::kContrastive: {
      MLCD_ASSIGN_OR_RETURN(
          ContrastiveObjectiveOptions o,
          ContrastiveOptionsFromSpec(spec, embedding_dim, context.round, context.device));
      MLCD_ASSIGN_OR_RETURN(std::unique_ptr<ContrastiveObjective> made,
                            ContrastiveObjective::Create(o, context.comm));
      return std::unique_ptr<TrainObjective>(std::move(made));
    }
    case LossFamily::kLabelHead: {
      MLCD_ASSIGN_OR_RETURN(LabelHeadObjectiveOptions o,
                            LabelHeadOptionsFromSpec(spec, context.vit, context.job_total_steps));
      o.device = context.device;
      MLCD_ASSIGN_OR_RETURN(std::unique_ptr<LabelHeadObjective> made,
                            LabelHeadObjective::Create(o, context.comm));
      return std::unique_ptr<TrainObjective>(std::move(made));
    }
    case LossFamily::kClassification:
      break;
  }
  MLCD_ASSIGN_OR_RETURN(
      PartialFcOptions popts,
      LayerOptionsFromSpec(spec, embedding_dim, context.round, context.device, context.precision));
  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<PartialFcObjective> made,
                        PartialFcObjective::Create(popts, context.comm));
  return std::unique_ptr<TrainObjective>(std::move(made));
}

}  // namespace mlcd::worker
