#include "worker/train/label_head_spec.h"

#include <cmath>

namespace mlcd::worker {

StatusOr<LabelHeadObjectiveOptions> LabelHeadOptionsFromSpec(const v1::JobSpec& spec,
                                                             const VitOptions& vit,
                                                             int64_t job_total_steps) {
  LabelHeadObjectiveOptions o;
  MLCD_ASSIGN_OR_RETURN(o.variant, ParseLabelHeadVariant(spec.loss().variant()));
  o.num_classes = spec.clustering().k();
  o.embedding_dim = vit.embed_dim;
  const v1::MulconSpec& m = spec.loss().mulcon();
  o.head.token_dim = vit.width;
  o.head.num_labels = o.num_classes;
  o.head.label_dim = m.label_dim();
  o.head.heads = m.heads();
  o.head.projection_dim = m.projection_dim();
  o.temperature = m.temperature();
  o.llcl_weight = m.llcl_weight();
  o.pretrain_steps = static_cast<int64_t>(
      std::floor(m.pretrain_fraction() * static_cast<double>(job_total_steps)));
  o.contrastive_lr_multiplier = m.contrastive_lr_multiplier();
  o.weight_decay = spec.optimizer().weight_decay();
  o.beta1 = spec.optimizer().beta1();
  o.beta2 = spec.optimizer().beta2();
  o.seed = spec.training().seed();
  return o;
}

}  // namespace mlcd::worker
