// A job spec's label-head objective (loss.variant "bce" or "mulcon"; docs/loss.md, "Label
// heads") as the options of worker/train/label_head_objective.h. The spec has been through
// ApplyJobSpecDefaults and validation (common/spec_validation.cc).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/model/vit.h"
#include "worker/train/label_head_objective.h"

namespace mlcd::worker {

// K = clustering.k (a given label set's class count); the bce head reads the embedding
// (vit.embed_dim), the mulcon head the patch tokens (vit.width); MulCon's step 1 lasts
// floor(pretrain_fraction x job_total_steps) optimizer steps. The head's AdamW takes the
// optimizer section's betas and weight decay; its seed is training.seed.
StatusOr<LabelHeadObjectiveOptions> LabelHeadOptionsFromSpec(const v1::JobSpec& spec,
                                                             const VitOptions& vit,
                                                             int64_t job_total_steps);

}  // namespace mlcd::worker
