#include "worker/model/model_memory.h"

#include <algorithm>
#include <cmath>

#include "common/format.h"
#include "common/spec_validation.h"
#include "worker/cluster/rank_memory.h"

namespace mlcd::worker {
namespace {

constexpr int64_t kFloat = 4;
constexpr int64_t kBFloat16 = 2;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string Bytes(int64_t bytes) {
  return FormatBytes(static_cast<uint64_t>(std::max<int64_t>(0, bytes)));
}

// Activation bytes of `batch` images.
int64_t ActivationBytes(const ModelMemoryPlan& p, int64_t batch) {
  const double t = p.vit.tokens(), w = p.vit.width, h = p.vit.mlp_hidden(), heads = p.vit.heads;
  double per_image = 0;
  if (p.use == ModelUse::kTraining) {
    per_image = p.vit.depth * ((8 + 2 * p.vit.mlp_ratio) * t * w + 2 * heads * t * t);
  } else if (p.use == ModelUse::kInference) {
    per_image = t * (7 * w + 2 * h) + heads * t * t;
  }
  const bool bf16 = p.use == ModelUse::kTraining && p.precision == Precision::kBf16Activations;
  const double element = static_cast<double>(bf16 ? kBFloat16 : kFloat);
  // Capped far above any memory, so that no batch makes the sum overflow.
  return static_cast<int64_t>(std::min(static_cast<double>(batch) * per_image * element, 1e18));
}

// The rank's class-centre shard at world size `world` (the largest, n = ceil(k / world) rows)
// and one step's workspace against its m sampled rows (docs/loss.md "Memory").
int64_t ClassCentreBytes(const ModelMemoryPlan& p, int world) {
  if (p.use != ModelUse::kTraining || p.num_classes <= 0) return 0;
  const int64_t rows = CeilDiv(p.num_classes, std::max(1, world));
  const double ratio = std::clamp(p.sample_ratio, 0.0, 1.0);
  const int64_t drawn = static_cast<int64_t>(std::ceil(static_cast<double>(rows) * ratio));
  const int64_t positives = p.global_batch * std::max<int64_t>(1, p.labels_per_sample);
  const int64_t sampled = std::min(rows, drawn + positives);
  const int64_t d = p.vit.embed_dim, b = p.global_batch;
  const int64_t state = rows * d * kFloat * 3 + rows * 8;
  const int64_t workspace = 9 * b * sampled + 8 * sampled * d * kFloat + 6 * b * d * kFloat;
  return state + workspace;
}

ModelMemoryNeed Estimate(const ModelMemoryPlan& p, int world, int64_t batch) {
  const int64_t params = VitParameterCount(p.vit) * kFloat;
  ModelMemoryNeed n;
  n.parameters = params;
  if (p.use == ModelUse::kTraining) {
    if (UsesBf16(p.precision)) n.parameters += VitParameterCount(p.vit) * kBFloat16;
    n.gradients = params;
    n.optimizer = 2 * params;
  } else if (p.use == ModelUse::kExport) {
    n.optimizer = params;
  }
  n.activations = ActivationBytes(p, batch);
  n.class_centres = ClassCentreBytes(p, world);
  return n;
}

// What would fit in `share` bytes, for the refusal.
std::string WhatFits(const ModelMemoryPlan& p, const ModelMemoryNeed& need, int64_t share) {
  const int64_t model = need.parameters + need.gradients + need.optimizer;
  if (model >= share)
    return "the model alone (" + Bytes(model) +
           ") does not fit: use a smaller model (model.width, model.depth, model.mlp_ratio)";
  if (p.use == ModelUse::kExport) return "free memory on this host, or export on a larger one";
  const int64_t per_image = ActivationBytes(p, 1);
  if (p.use == ModelUse::kInference) {
    const int64_t batch = per_image > 0 ? (share - model) / per_image : 0;
    return batch >= 1
               ? "a batch size of at most " + std::to_string(batch) + " would fit (--batch-size)"
               : "not even one image fits beside the model: use a smaller model";
  }
  // Training: more ranks shrink both the per-rank batch and the class-centre shard.
  for (int world = std::max(1, p.world) + 1; world <= kMaxWorldSize; ++world) {
    const int64_t batch = CeilDiv(p.global_batch, world);
    if (Estimate(p, world, batch).Total() <= share)
      return "a world size of " + std::to_string(world) +
             " would fit (training.world_size; ranks on other hosts), or a smaller "
             "training.batch_size or model";
  }
  const int64_t fixed = model + need.class_centres;
  const int64_t batch = per_image > 0 && fixed < share ? (share - fixed) / per_image : 0;
  return "no world size up to " + std::to_string(kMaxWorldSize) + " fits" +
         (batch >= 1 ? "; a per-rank batch of at most " + std::to_string(batch) +
                           " images would (training.batch_size / training.world_size)"
                     : ": use a smaller model, or a smaller clustering.k");
}

const char* UseName(ModelUse use) {
  switch (use) {
    case ModelUse::kTraining:
      return "training";
    case ModelUse::kInference:
      return "inference";
    case ModelUse::kExport:
      return "export";
  }
  return "?";
}

}  // namespace

int64_t VitParameterCount(const VitOptions& o) {
  const int64_t w = o.width, h = o.mlp_hidden();
  int64_t n = 0;
  if (o.stem == VitStem::kConv) {
    int64_t in = o.channels;
    for (int c : o.stem_channels()) {
      n += int64_t{c} * in * 9 + 2 * int64_t{c};  // 3x3 conv (no bias), GroupNorm
      in = c;
    }
    n += w * in;  // the 1x1 projection
  } else {
    n += w * o.channels * o.patch_size * o.patch_size;
  }
  if (o.layout == VitLayout::kVit) n += w;  // patch bias
  if (o.pooling == VitPooling::kCls) n += w;
  n += int64_t{o.tokens()} * w;                  // position embedding
  if (o.layout == VitLayout::kClip) n += 2 * w;  // pre-LayerNorm
  // A block: two LayerNorms, qkv, proj, fc1, fc2 (with biases).
  n += int64_t{o.depth} * (4 * w + (3 * w * w + 3 * w) + (w * w + w) + (h * w + h) + (w * h + w));
  n += 2 * w;                     // final LayerNorm
  n += int64_t{o.embed_dim} * w;  // projection
  return n;
}

ModelMemoryNeed EstimateModelMemory(const ModelMemoryPlan& plan) {
  return Estimate(plan, plan.world, plan.batch);
}

Status CheckModelMemoryFits(const ModelMemoryPlan& p, const ModelMemoryNeed& need,
                            int64_t free_bytes, const std::string& where) {
  const int ranks = std::max(1, p.ranks_on_host);
  const int64_t share = free_bytes / ranks;
  if (free_bytes < 0 || need.Total() <= share) return Status::Ok();
  std::string parts = "parameters " + Bytes(need.parameters) + " (" +
                      std::to_string(VitParameterCount(p.vit)) + " float32)";
  if (p.use == ModelUse::kTraining)
    parts += "; gradients " + Bytes(need.gradients) + "; AdamW moments " + Bytes(need.optimizer);
  if (p.use == ModelUse::kExport) parts += "; the written copy " + Bytes(need.optimizer);
  if (p.use != ModelUse::kExport)
    parts += "; activations " + Bytes(need.activations) + " (" + std::to_string(p.batch) +
             " images of " + std::to_string(p.vit.tokens()) + " tokens)";
  if (p.use == ModelUse::kTraining)
    parts += "; class-centre shard " + Bytes(need.class_centres) + " (" +
             std::to_string(CeilDiv(p.num_classes, std::max(1, p.world))) + " of " +
             std::to_string(p.num_classes) + " centres of " + std::to_string(p.vit.embed_dim) +
             ", moments, logits)";
  const std::string free_text =
      ranks > 1 ? Bytes(free_bytes) + " free, shared by " + std::to_string(ranks) +
                      " ranks of the gang on it: " + Bytes(share) + " each"
                : Bytes(free_bytes) + " free";
  return Status::ResourceExhausted(std::string(UseName(p.use)) + " of " +
                                   DescribeVitOptions(p.vit) + " needs " + Bytes(need.Total()) +
                                   " on " + where + " (" + parts + ") but " + where + " has " +
                                   free_text + "; " + WhatFits(p, need, share));
}

Status CheckModelMemory(const ModelMemoryPlan& plan, const at::Device& device) {
  const ModelMemoryNeed need = EstimateModelMemory(plan);
  const bool cuda = device.is_cuda();
  MLCD_RETURN_IF_ERROR(CheckModelMemoryFits(plan, need, cluster::FreeBytes(device),
                                            cuda ? device.str() : "this host"));
  if (!cuda) return Status::Ok();
  // The model and the rank's centre shard are built and initialised (or loaded) on the host,
  // then moved.
  ModelMemoryNeed staging;
  staging.parameters = need.parameters;
  if (plan.use == ModelUse::kTraining && plan.num_classes > 0) {
    staging.class_centres =
        CeilDiv(plan.num_classes, std::max(1, plan.world)) * plan.vit.embed_dim * kFloat;
  }
  return CheckModelMemoryFits(plan, staging, cluster::FreeBytes(at::Device(at::kCPU)),
                              "this host (staging)");
}

}  // namespace mlcd::worker
