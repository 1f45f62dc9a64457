// One optimizer step of one rank, on the rank's device (docs/torch-builds.md):
//
//   images (host, float32)  --pinned, non-blocking copy-->  device
//   emb   = ViT(images)                 under the precision policy, float32 out
//   r     = objective.ForwardBackward   on the objective's input device (worker/train/
//                                       objective.h): the PartialFc device layer on a CUDA
//                                       device takes emb where it is and reads only the loss;
//                                       the fused host layer (the CPU default) takes a host
//                                       copy; the gradient comes back to the device
//   emb.backward(r.grad_embeddings)     backbone backward on the device
//   GradSync (NCCL for CUDA, Gloo for CPU), objective.AllReduceGradients
//     ->  BackboneAdamW::StepOnDevice  ->  objective.MaskedOptimizerStep  ->  Settle
//                                       both updates apply only if the gradient's norm is
//                                       finite; with the fused AdamW that flag stays on the
//                                       device, and the host reads the norm at the end
//
// The precision policy (training.precision):
//   kFp32             float32 throughout.
//   kBf16             the backbone's forward runs under autocast for its device with bfloat16:
//                     matmuls (Linear, attention through scaled_dot_product_attention) in
//                     bf16; LayerNorm, softmax and GELU as autocast decides (float32); the
//                     residual stream float32, as eager PyTorch under autocast keeps it.
//   kBf16Activations  the images enter the backbone as bfloat16 and every activation stays
//                     bfloat16 (worker/model/vit.h): half the bytes each op reads and writes,
//                     and half the activations kept for the backward; no autocast.
// In every mode the embedding is cast to float32 before it leaves the backbone, and the
// parameters, their gradients, the optimizer state, the objective's parameters (class centres,
// heads), the logits and the loss are float32 (as insightface's PartialFC and the paper's
// successors do). With bf16 the fused CPU kernels step aside for ATen's own (they are float32
// kernels).
#pragma once

#include <torch/torch.h>

#include "common/enums.h"
#include "common/status.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/grad_sync.h"
#include "worker/train/image_bytes.h"
#include "worker/train/objective.h"

namespace mlcd::worker {

using ::mlcd::ParsePrecision;
using ::mlcd::Precision;
using ::mlcd::PrecisionName;

// "cpu", "cuda", "cuda:N"; "auto" = cuda:`local_rank` % device count when CUDA is available,
// else cpu. INVALID_ARGUMENT for other names, a CUDA device in a build or on a machine without
// CUDA, or an index past the device count.
StatusOr<torch::Device> ResolveDevice(const std::string& name, int local_rank);

// Seconds of each part of a step (this rank). `backbone_forward` and `backbone_backward`
// include waiting for the device where the step has to (the embedding's copy to the host,
// the gradient sync).
struct TrainStepTimings {
  double host_to_device = 0;
  double backbone_forward = 0;
  double classification_layer = 0;        // the objective's ForwardBackward, collectives excluded
  double classification_collectives = 0;  // the objective's collectives
  double backbone_backward = 0;
  double grad_sync = 0;  // the backbone's and the objective's gradient all-reduce
  double backbone_optimizer = 0;
  double centre_optimizer = 0;  // the objective's OptimizerStep
  double total = 0;
};

struct TrainStepResult {
  ObjectiveStep objective;
  BackboneStepStats backbone;
  TrainStepTimings timings;
};

// The parts a step works on (owned by the caller, which must keep them alive). model,
// flat's buffers and the optimizer's state live on `device`; `grad_sync` uses collectives
// that take tensors of that device (NCCL for CUDA); `objective` takes the backbone's outputs
// on its input_device() (the PartialFc device layer: `device`; the host layer: the host).
struct TrainStepParts {
  VisionTransformer model{nullptr};
  FlatParameters* flat = nullptr;
  BackboneAdamW* optimizer = nullptr;
  GradSync* grad_sync = nullptr;
  TrainObjective* objective = nullptr;
  // The dataset's normalisation, for batches that arrive as uint8 pixels (Run); may be empty
  // when every batch is float.
  PixelNormalisation pixels;
};

class TrainStep {
 public:
  TrainStep(TrainStepParts parts, torch::Device device, Precision precision);

  // The backbone's forward under the precision policy: images on the device, float32
  // embeddings [B, embed_dim] on the device (autograd graph kept).
  torch::Tensor Embed(const torch::Tensor& images);

  // The backbone's forward for an objective: the embedding (autograd graph kept) and, when
  // `needs.patch_tokens`, the last block's patch tokens of the same pass.
  StatusOr<BackboneOutput> Forward(const torch::Tensor& images, const ObjectiveNeeds& needs);

  // One step: images [rows, C, S, S] on the host (pinned when it came from PinnedCopy or a
  // pinning BatchLoader, then the copy overlaps), float32 model input or uint8 pixels that the
  // step normalises on the device with parts.pixels (worker/train/image_bytes.h) -- uint8
  // without parts.pixels is INVALID_ARGUMENT --, labels int32/int64 [rows, l] on the host
  // (undefined when the objective reads none). `lr` is the backbone's learning rate, `objective_lr` the
  // objective's. Errors of the objective and the collectives are returned (every rank gets
  // the same for bad input), as are a learning rate that is not finite and >= 0 and a
  // non-finite backbone gradient (INVALID_ARGUMENT); then no parameter, optimizer moment or
  // step count changed.
  StatusOr<TrainStepResult> Run(const torch::Tensor& images, const torch::Tensor& labels, double lr,
                                double objective_lr);

  torch::Device device() const { return device_; }
  Precision precision() const { return precision_; }

 private:
  TrainStepParts parts_;
  torch::Device device_;
  // `images` (on the device, float) as the backbone takes them under precision_.
  torch::Tensor BackboneInput(const torch::Tensor& images) const;

  Precision precision_;
  PixelScaleShift pixel_scale_shift_;  // parts.pixels on device_; undefined when it is empty
};

// A host tensor the device can read asynchronously: pinned when `device` is CUDA (a copy),
// the tensor itself otherwise.
torch::Tensor PinnedCopy(const torch::Tensor& host, torch::Device device);

}  // namespace mlcd::worker
