#include "worker/train/train_step.h"

#include <torch/cuda.h>

#include <chrono>
#include <cmath>

#include "worker/loss/device_timer.h"
#include "worker/torch_compat.h"

namespace mlcd::worker {

StatusOr<torch::Device> ResolveDevice(const std::string& name, int local_rank) {
  const bool have_cuda = torch::cuda::is_available();
  const int64_t count = have_cuda ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "auto") {
    if (count == 0) return torch::Device(torch::kCPU);
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
  }
  if (name != "cuda" && name.rfind("cuda:", 0) != 0) {
    return Status::InvalidArgument("unknown device '" + name +
                                   "': use auto, cpu, cuda or cuda:N (N a device index)");
  }
  if (count == 0) {
    return Status::InvalidArgument(
        "device '" + name + "' was asked for but " +
        (have_cuda ? std::string("no CUDA device is visible") : "CUDA is not available") +
        " to this mlcd-worker (libtorch " + compat::TorchVersion() +
        "); use --device cpu, or a build with -DMLCD_WITH_CUDA=ON against a CUDA libtorch "
        "(scripts/setup.sh with MLCD_TORCH=pip) on a machine with a GPU");
  }
  int64_t index = local_rank % count;
  if (name.size() > 5) {
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.size() > 4 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("device '" + name + "': N in cuda:N must be a device index");
    }
    index = std::stoll(digits);
    if (index >= count) {
      return Status::InvalidArgument("device '" + name + "': this machine has " +
                                     std::to_string(count) + " CUDA device(s)");
    }
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

torch::Tensor PinnedCopy(const torch::Tensor& host, torch::Device device) {
  if (!device.is_cuda() || !host.defined() || !host.device().is_cpu()) return host;
  return host.pin_memory();
}

TrainStep::TrainStep(TrainStepParts parts, torch::Device device, Precision precision)
    : parts_(std::move(parts)), device_(device), precision_(precision) {
  if (!parts_.pixels.mean.empty()) pixel_scale_shift_ = PixelScaleShiftOn(parts_.pixels, device_);
}

torch::Tensor TrainStep::BackboneInput(const torch::Tensor& images) const {
  if (precision_ != Precision::kBf16Activations || images.scalar_type() == torch::kBFloat16)
    return images;
  return images.to(torch::kBFloat16);
}

torch::Tensor TrainStep::Embed(const torch::Tensor& images) {
  compat::AutocastScope autocast(device_.type(), torch::kBFloat16, precision_ == Precision::kBf16);
  torch::Tensor emb = parts_.model->forward(BackboneInput(images));
  return emb.scalar_type() == torch::kFloat ? emb : emb.to(torch::kFloat);
}

StatusOr<BackboneOutput> TrainStep::Forward(const torch::Tensor& images,
                                            const ObjectiveNeeds& needs) {
  if (!needs.patch_tokens) return BackboneOutput{Embed(images), torch::Tensor()};
  compat::AutocastScope autocast(device_.type(), torch::kBFloat16, precision_ == Precision::kBf16);
  BackboneOutput out;
  parts_.model->Features(BackboneInput(images), VitFeatures::kEmbedding, 4, &out.embeddings,
                         &out.patch_tokens);
  for (torch::Tensor* t : {&out.embeddings, &out.patch_tokens}) {
    if (t->scalar_type() != torch::kFloat) *t = t->to(torch::kFloat);
  }
  return out;
}

namespace {

// `t` detached, on `device` (a copy only when it lives elsewhere); undefined stays undefined.
torch::Tensor DetachedOn(const torch::Tensor& t, torch::Device device) {
  if (!t.defined()) return t;
  return t.device() == device ? t.detach() : t.detach().to(device);
}

}  // namespace

StatusOr<TrainStepResult> TrainStep::Run(const torch::Tensor& images, const torch::Tensor& labels,
                                         double lr, double objective_lr) {
  // Both learning rates are checked before anything runs, so a bad one changes nothing.
  if (!(lr >= 0.0) || !std::isfinite(lr) || !(objective_lr >= 0.0) ||
      !std::isfinite(objective_lr)) {
    return Status::InvalidArgument("learning rates must be finite and >= 0 (backbone " +
                                   std::to_string(lr) + ", objective " +
                                   std::to_string(objective_lr) + ")");
  }
  TrainObjective& objective = *parts_.objective;
  const ObjectiveNeeds needs = objective.needs();
  TrainStepResult r;
  TrainStepTimings& t = r.timings;
  // Part times from events on the device's stream (wall clock on the CPU): marking does not
  // wait for the device; reading them at the end does (docs/worker.md, "The step on a GPU").
  DeviceTimer timer(device_);
  const int t0 = timer.Mark();
  parts_.flat->ZeroGrad();
  torch::Tensor x = images.device() == device_ ? images
                                               : images.to(torch::TensorOptions().device(device_),
                                                           /*non_blocking=*/images.is_pinned());
  if (x.scalar_type() == torch::kUInt8) {
    if (!pixel_scale_shift_.scale.defined()) {
      return Status::InvalidArgument(
          "the batch's images are uint8 pixels but the step has no normalisation for them "
          "(TrainStepParts.pixels)");
    }
    x = NormaliseImages(x, pixel_scale_shift_);
  }
  const int t1 = timer.Mark();
  MLCD_ASSIGN_OR_RETURN(BackboneOutput out, Forward(x, needs));
  // The objective takes the outputs on its device: the PartialFc device layer where they are,
  // the host layer a host copy (which waits for the forward).
  const torch::Device input_device = objective.input_device();
  BackboneOutput in{DetachedOn(out.embeddings, input_device),
                    DetachedOn(out.patch_tokens, input_device)};
  const int t2 = timer.Mark();
  auto step = objective.ForwardBackward(in, needs.labels ? labels : torch::Tensor());
  if (!step.ok()) return step.status();
  const int t3 = timer.Mark();
  parts_.grad_sync->BeginBackward();
  std::vector<torch::Tensor> outputs{out.embeddings}, grads{step->grad_embeddings.to(device_)};
  if (out.patch_tokens.defined() && step->grad_patch_tokens.defined()) {
    outputs.push_back(out.patch_tokens);
    grads.push_back(step->grad_patch_tokens.to(device_));
  }
  torch::autograd::backward(outputs, grads);
  const int t4 = timer.Mark();
  Status synced = parts_.grad_sync->AllReduceGradients();
  if (synced.ok()) synced = objective.AllReduceGradients();
  if (!synced.ok()) {
    objective.DiscardGradient();
    return synced;
  }
  const int t5 = timer.Mark();
  // Both updates apply only if the gradient's norm is finite (the same on every rank after the
  // all-reduce): a non-finite one leaves every parameter and moment as it was. With the fused
  // AdamW the check is a device scalar that masks both updates, read on the host only once
  // both are queued (Settle); the other kernels check on the host first.
  StatusOr<PendingBackboneStep> pending = parts_.optimizer->StepOnDevice(lr, 1.0);
  if (!pending.ok()) {
    objective.DiscardGradient();
    return pending.status();
  }
  const int t6 = timer.Mark();
  const Status centre = objective.MaskedOptimizerStep(objective_lr, pending->apply);
  const int t7 = timer.Mark();
  StatusOr<BackboneStepStats> backbone = parts_.optimizer->Settle(*pending);
  if (!backbone.ok()) return backbone.status().WithContext("loss " + std::to_string(step->loss));
  MLCD_RETURN_IF_ERROR(centre);
  r.backbone = *backbone;
  r.objective = std::move(*step);
  t.host_to_device = timer.Seconds(t0, t1);
  t.backbone_forward = timer.Seconds(t1, t2);
  t.classification_collectives = r.objective.collective_seconds;
  t.classification_layer = r.objective.compute_seconds;
  t.backbone_backward = timer.Seconds(t3, t4);
  t.grad_sync = timer.Seconds(t4, t5);
  t.backbone_optimizer = timer.Seconds(t5, t6);
  t.centre_optimizer = timer.Seconds(t6, t7);
  t.total = timer.Seconds(t0, t7);
  return r;
}

}  // namespace mlcd::worker
