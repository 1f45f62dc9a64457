// The objective a job spec trains (worker/train/objective.h), chosen by the family of
// loss.variant (common/enums.h LossFamilyOf, parsed once here):
//   classification (mlcd | mlc | softmax): PartialFcObjective, the round's PartialFc layer
//     (worker/train/round_layer.h: fresh class centres each round, seeded by (seed, round));
//   contrastive (infonce | mulsupcon | supcon-all | supcon-any): ContrastiveObjective with
//     loss.temperature, two views per image and the projection head of loss.projection_dim /
//     loss.projection_hidden_dim, seeded by (seed, round), AdamW with the optimizer section's
//     betas and weight decay (biases undecayed) and its gradient clipping;
//   label head (bce | mulcon): LabelHeadObjective (worker/train/label_head_objective.h) with
//     the options of worker/train/label_head_spec.h, on the step's device.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "common/enums.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/dist/collectives.h"
#include "worker/model/vit.h"
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

// What an objective is built from beside the spec.
struct ObjectiveContext {
  VitOptions vit;  // the backbone: embed_dim (every head on the embedding), width (mulcon)
  int round = 0;   // seeds a round's fresh state (class centres, projection head)
  torch::Device device{torch::kCPU};  // the step's device
  Precision precision = Precision::kFp32;
  int64_t job_total_steps = 0;  // the job's optimizer steps: the length of MulCon's step 1
  Collectives* comm = nullptr;  // must outlive the objective
};

// The objective of round `context.round` (a collective: every rank calls it). INVALID_ARGUMENT
// for a variant no family knows.
StatusOr<std::unique_ptr<TrainObjective>> ObjectiveFromSpec(const v1::JobSpec& spec,
                                                            const ObjectiveContext& context);

}  // namespace mlcd::worker
