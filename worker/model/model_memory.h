// What one process holds to build and run the ViT (worker/model/vit.h), estimated from its
// options before any tensor exists, against what is free where it will hold it, so that a
// model that cannot fit fails at once, naming its bytes, what is free and what would fit,
// rather than at an allocation (or by the kernel's OOM killer) after minutes of building.
// Every path that builds a model runs it first: training (worker/train/trainer.cc), and
// embed, eval and export (LoadEmbeddingModel, worker/eval/embed.h).
//
// The estimate (float32 unless said; P = VitParameterCount, B = images per forward on this
// rank, T = tokens, w = width, h = MLP hidden, H = heads, D = embed_dim):
//   parameters    P x 4, + P x 2 in training under a bf16 precision: the bfloat16 copies the
//                 forward makes (autocast's cast cache, or bf16-activations' casts) and the
//                 backward keeps
//   gradients     P x 4                                    (training)
//   optimizer     2 x P x 4: AdamW's two moments           (training)
//                 P x 4: the copy of every tensor written  (export)
//   activations   training: B x depth x ((8 + 2 x mlp_ratio) x T x w + 2 x H x T^2) x 4, what
//                 the forward keeps for the backward (common/limits.h kMaxActivationBytes),
//                 x 2 instead of x 4 under bf16-activations (every activation bfloat16);
//                 inference: B x (T x (7 x w + 2 x h) + H x T^2) x 4, one block's working
//                 tensors and the features
//   class_centres training: the rank's shard of n = ceil(k / world) centres of D with its
//                 two AdamW moments and step counts, 3 x n x D x 4 + 8 x n, and one step's
//                 workspace against its m = min(n, ceil(r x n) + B_global x l) sampled rows:
//                 9 x B_global x m (logits, a temporary and the clamp mask) + 8 x m x D x 4
//                 (the gathered rows, normalised, their gradients, the optimizer's rows) +
//                 6 x B_global x D x 4 (the gathered batch, normalised, its gradient)
//   staging       on a CUDA device the host also holds the parameters and the shard's
//                 centres while they are built, before they move
//
// Ranks of one gang that share a host share its free memory: each is checked against the
// free bytes divided by `ranks_on_host` (the trainer counts them over the gang before it
// builds anything), so that N ranks cannot each pass against the same free memory.
//
//   ModelMemoryPlan plan;  plan.vit = vit;  plan.use = ModelUse::kTraining;  ...
//   MLCD_RETURN_IF_ERROR(CheckModelMemory(plan, device));
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "common/enums.h"
#include "common/status.h"
#include "worker/model/vit.h"

namespace mlcd::worker {

enum class ModelUse {
  kTraining,   // parameters, gradients, AdamW, activations kept for backward, class centres
  kInference,  // parameters and a forward's working activations (embed, eval)
  kExport,     // parameters and the copy written (no forward)
};

struct ModelMemoryPlan {
  VitOptions vit;
  ModelUse use = ModelUse::kInference;
  // Images of one forward on this rank: training, the rank's share of the global batch;
  // inference, the batch size. Unused for export.
  int64_t batch = 0;
  // Training: ranks of the gang (the class centres are sharded over them), the gang's images
  // per step (the logits), clustering.k and loss.sample_ratio.
  int world = 1;
  int64_t global_batch = 0;
  int64_t num_classes = 0;
  double sample_ratio = 1.0;
  int64_t labels_per_sample = 1;  // clustering.l: every label of the batch is sampled
  // Ranks of this process's gang on this host (this one included), >= 1: they divide the
  // host's free memory.
  int ranks_on_host = 1;
  // Training: training.precision (the bytes of the activations and of the parameters' bf16
  // copies, above).
  Precision precision = Precision::kFp32;
};

// One process's bytes, by what holds them.
struct ModelMemoryNeed {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  int64_t class_centres = 0;
  int64_t Total() const { return parameters + gradients + optimizer + activations + class_centres; }
};

// The number of parameters VisionTransformerImpl registers for `vit` (exact: patch or conv
// stem, biases, class token, position embedding, LayerNorms, blocks, projection).
int64_t VitParameterCount(const VitOptions& vit);

ModelMemoryNeed EstimateModelMemory(const ModelMemoryPlan& plan);

// RESOURCE_EXHAUSTED when need.Total() is above this process's share of `free_bytes`
// (free_bytes / plan.ranks_on_host) on `where` ("this host", "cuda:0"), naming every part,
// the total, the free bytes and the share, and what would fit: for training the smallest
// world size (or per-rank batch), for inference a batch size; or that the model alone is too
// big. OK when free_bytes < 0 (unknown).
Status CheckModelMemoryFits(const ModelMemoryPlan& plan, const ModelMemoryNeed& need,
                            int64_t free_bytes, const std::string& where);

// EstimateModelMemory + CheckModelMemoryFits against the free memory of `device`
// (cluster::FreeBytes, worker/cluster/rank_memory.h); on a CUDA device also the host, where
// the model is built before it moves.
Status CheckModelMemory(const ModelMemoryPlan& plan, const at::Device& device);

}  // namespace mlcd::worker
