// The objective a job spec trains (worker/train/objective.h), chosen by the family of
// loss.variant (common/enums.h LossFamilyOf):
//   classification (mlcd | mlc | softmax): PartialFcObjective, the round's PartialFc layer
//     (worker/train/round_layer.h: fresh class centres each round, seeded by (seed, round));
//   contrastive (infonce | mulsupcon | supcon-all | supcon-any): ContrastiveObjective with
//     loss.temperature, two views per image and the projection head of loss.projection_dim /
//     loss.projection_hidden_dim, seeded by (seed, round), AdamW with the optimizer section's
//     betas and weight decay (biases undecayed) and its gradient clipping.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "common/enums.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/dist/collectives.h"
#include "worker/train/contrastive_objective.h"
#include "worker/train/objective.h"

namespace mlcd::worker {

// Whether the spec's objective reads per-sample labels from a label set: every variant but
// infonce.
bool NeedsLabels(const v1::JobSpec& spec);

// Rows per image in the spec's batches: ContrastiveOptions::views for a contrastive variant
// (2), else 1.
int ViewsPerImage(const v1::JobSpec& spec);

// ContrastiveObjective's options from a spec whose loss.variant is contrastive.
StatusOr<ContrastiveObjectiveOptions> ContrastiveOptionsFromSpec(const v1::JobSpec& spec,
                                                                 int64_t embedding_dim, int round,
                                                                 const torch::Device& device);

// The objective of round `round` on `device` (a collective: every rank calls it). `comm`
// must outlive it.
StatusOr<std::unique_ptr<TrainObjective>> ObjectiveFromSpec(const v1::JobSpec& spec,
                                                            int64_t embedding_dim, int round,
                                                            const torch::Device& device,
                                                            Precision precision, Collectives* comm);

}  // namespace mlcd::worker
