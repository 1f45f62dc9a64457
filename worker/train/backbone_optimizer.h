// The backbone's parameters in one contiguous buffer, and AdamW over it.
//
// FlatParameters moves every parameter of the given groups into one contiguous float tensor
// (each parameter becomes a view of it: same Variable, new storage) and gives each one a
// gradient that is a view of one contiguous gradient tensor. Autograd then accumulates
// straight into that buffer, so the data-parallel allreduce (worker/train/grad_sync.h) runs on
// slices of it without copies, the global gradient norm is one pass, and the optimizer is
// one fused pass per group. Do not call Module::zero_grad() on a model whose parameters are
// flattened (it would drop the gradient views); use FlatParameters::ZeroGrad().
//
// BackboneAdamW: AdamW (decoupled weight decay, torch.optim.AdamW semantics) with a weight
// decay per group, global-norm gradient clipping and a gradient scale (1/world size) folded
// into the same pass. Its state (step count, first and second moments) is replicated on every
// rank, since every rank holds the whole backbone. The update runs as one pass per group on
// every device (AdamWKernel). CheckedStep reads the gradient's global norm on the host first,
// for the non-finite refusal and the clipping factor; StepOnDevice + Settle, what TrainStep
// runs, do the same without that read before the update where the kernel is kFused: the norm,
// the clipping factor and the refusal stay on the device, and the host reads them after both
// optimizers' updates are queued.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

class FlatParameters {
 public:
  FlatParameters() = default;
  // `groups` are lists of parameters (float, same device); no parameter may repeat.
  explicit FlatParameters(const std::vector<std::vector<torch::Tensor>>& groups);

  torch::Tensor& values() { return values_; }
  torch::Tensor& grads() { return grads_; }
  int64_t numel() const { return values_.defined() ? values_.numel() : 0; }
  int num_groups() const { return static_cast<int>(group_offsets_.size()) - 1; }
  // Element range [begin, end) of group g inside values()/grads().
  int64_t group_begin(int g) const { return group_offsets_[static_cast<size_t>(g)]; }
  int64_t group_end(int g) const { return group_offsets_[static_cast<size_t>(g) + 1]; }
  // The parameters, groups concatenated, and where parameter i starts in values()/grads().
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  int64_t parameter_offset(size_t i) const { return param_offsets_[i]; }

  // Zeroes the gradient buffer (and re-attaches the gradient views should anything have
  // replaced them).
  void ZeroGrad();

 private:
  torch::Tensor values_, grads_;
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> param_offsets_;
  std::vector<int64_t> group_offsets_{0};
};

// The code that applies the update (the same arithmetic, float32 throughout).
enum class AdamWKernel {
  // kFused where the build has it for the device (CUDA with libtorch 2.x, the CPU with 2.4+:
  // faster than kLoops there, bench/RESULTS.md "Backbone kernels"); otherwise kLoops on the
  // CPU and kAtenOps elsewhere.
  kAuto,
  kLoops,    // our one-pass CPU loop (worker/model/vit_kernels.h); CPU tensors only
  kFused,    // at::_fused_adamw_, one kernel per group (compat::HasFusedAdamW)
  kAtenOps,  // a sequence of in-place ATen operations per group (any device and build)
};

// What `requested` runs as on `device`: itself where it can run there, else kAuto's choice.
AdamWKernel ChosenAdamWKernel(AdamWKernel requested, const torch::Device& device);
// "auto", "loops", "fused_adamw", "aten_ops".
const char* AdamWKernelName(AdamWKernel kernel);

struct BackboneAdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-6;
  // Per group of the FlatParameters (missing entries = 0).
  std::vector<double> weight_decay;
  // Clip the global gradient norm (after `grad_scale`) to this; <= 0 = no clipping.
  double grad_clip_norm = 5.0;
  AdamWKernel kernel = AdamWKernel::kAuto;
};

struct BackboneStepStats {
  double grad_norm = 0;  // global norm after grad_scale, before clipping
  double clip_coef = 1;  // factor applied to the gradient (<= 1)
};

// An update StepOnDevice queued, until Settle.
struct PendingBackboneStep {
  // 0-dim bool on the parameters' device: the gradient's norm is finite and the update
  // applies. The objective's update is masked with it (TrainObjective::MaskedOptimizerStep).
  torch::Tensor apply;
  // kFused: [2] float64 on the parameters' device, the global norm and the clipping factor.
  torch::Tensor figures;
  // Other kernels: CheckedStep's result, taken on the host.
  Status checked;
  BackboneStepStats checked_stats;
};

class BackboneAdamW {
 public:
  BackboneAdamW(FlatParameters* params, BackboneAdamWOptions options);

  // One update with learning rate `lr`; the gradient used is grads() * grad_scale, clipped.
  BackboneStepStats Step(double lr, double grad_scale = 1.0);
  // The same, unless the gradient's global norm is not finite (or `lr` is not finite and
  // >= 0): then INVALID_ARGUMENT naming the norm, and no parameter, moment or step count
  // changed.
  StatusOr<BackboneStepStats> CheckedStep(double lr, double grad_scale = 1.0);
  // CheckedStep in two halves. StepOnDevice queues the update: with kFused the norm, the
  // clipping factor and the finiteness are computed on the device, and the fused kernel skips
  // the update itself where the norm is not finite, with nothing read on the host; the other
  // kernels run CheckedStep here (host code). INVALID_ARGUMENT only for a bad `lr` (nothing
  // queued). Settle then reads the two figures (with kFused, after the update) and returns
  // CheckedStep's result: the stats, or INVALID_ARGUMENT for a non-finite norm, in which case
  // no parameter, moment or step count changed. Call Settle once per StepOnDevice, before the
  // next step.
  StatusOr<PendingBackboneStep> StepOnDevice(double lr, double grad_scale = 1.0);
  StatusOr<BackboneStepStats> Settle(const PendingBackboneStep& pending);

  int64_t step_count() const { return step_; }
  torch::Tensor& exp_avg() { return exp_avg_; }
  torch::Tensor& exp_avg_sq() { return exp_avg_sq_; }
  // Restores state saved from exp_avg()/exp_avg_sq()/step_count(); sizes must match.
  Status LoadState(int64_t step, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq);

 private:
  // The global norm of grads() * grad_scale and the clip factor; nothing changes.
  BackboneStepStats Measure(double grad_scale) const;
  // Applies the update with the stats Measure gave.
  void Apply(double lr, double grad_scale, const BackboneStepStats& stats);
  // The update of every group as step step_ + 1 (step_ unchanged). kLoops and kAtenOps scale
  // the gradient by `scale`; kFused divides it by `divisor` (a device scalar) and skips the
  // update where `skip` (a device scalar, may be undefined) holds 1.
  void UpdateGroups(double lr, AdamWKernel kernel, double scale, const torch::Tensor& divisor,
                    const torch::Tensor& skip);

  FlatParameters* params_;
  BackboneAdamWOptions options_;
  torch::Tensor exp_avg_, exp_avg_sq_;
  int64_t step_ = 0;
};

}  // namespace mlcd::worker
