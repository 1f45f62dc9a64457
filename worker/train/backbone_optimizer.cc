#include "worker/train/backbone_optimizer.h"

#include <cmath>

#include "worker/model/vit_kernels.h"
#include "worker/torch_compat.h"

namespace mlcd::worker {
namespace {

Status NonFiniteGradient(double norm) {
  return Status::InvalidArgument("the backbone gradient is non-finite (global norm " +
                                 std::to_string(norm) +
                                 "); nothing was updated: lower optimizer.lr or loss.scale");
}

Status CheckLearningRate(double lr) {
  if (lr >= 0.0 && std::isfinite(lr)) return Status::Ok();
  return Status::InvalidArgument("backbone learning rate " + std::to_string(lr) +
                                 " must be finite and >= 0");
}

}  // namespace

FlatParameters::FlatParameters(const std::vector<std::vector<torch::Tensor>>& groups) {
  int64_t total = 0;
  torch::TensorOptions options = torch::TensorOptions().dtype(torch::kFloat);
  bool first = true;
  for (const auto& group : groups) {
    for (const auto& p : group) {
      TORCH_CHECK(p.scalar_type() == torch::kFloat, "FlatParameters holds float parameters only");
      if (first) options = options.device(p.device());
      first = false;
      param_offsets_.push_back(total);
      params_.push_back(p);
      total += p.numel();
    }
    group_offsets_.push_back(total);
  }
  values_ = torch::empty({total}, options);
  grads_ = torch::zeros({total}, options);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    const int64_t off = param_offsets_[i];
    torch::Tensor view = values_.slice(0, off, off + p.numel()).view(p.sizes());
    view.copy_(p);
    p.set_data(view);
  }
  ZeroGrad();
}

void FlatParameters::ZeroGrad() {
  if (!grads_.defined()) return;
  grads_.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    const int64_t off = param_offsets_[i];
    torch::Tensor& g = p.mutable_grad();
    if (!g.defined() || g.data_ptr() != grads_.data_ptr<float>() + off) {
      g = grads_.slice(0, off, off + p.numel()).view(p.sizes());
    }
  }
}

AdamWKernel ChosenAdamWKernel(AdamWKernel requested, const torch::Device& device) {
  const bool fused = compat::HasFusedAdamW(device.type());
  if (requested == AdamWKernel::kLoops && device.is_cpu()) return requested;
  if (requested == AdamWKernel::kFused && fused) return requested;
  if (requested == AdamWKernel::kAtenOps) return requested;
  if (fused) return AdamWKernel::kFused;
  return device.is_cpu() ? AdamWKernel::kLoops : AdamWKernel::kAtenOps;
}

const char* AdamWKernelName(AdamWKernel kernel) {
  switch (kernel) {
    case AdamWKernel::kAuto:
      return "auto";
    case AdamWKernel::kLoops:
      return "loops";
    case AdamWKernel::kFused:
      return "fused_adamw";
    case AdamWKernel::kAtenOps:
      return "aten_ops";
  }
  return "?";
}

BackboneAdamW::BackboneAdamW(FlatParameters* params, BackboneAdamWOptions options)
    : params_(params), options_(std::move(options)) {
  exp_avg_ = torch::zeros_like(params_->values());
  exp_avg_sq_ = torch::zeros_like(params_->values());
}

BackboneStepStats BackboneAdamW::Measure(double grad_scale) const {
  torch::NoGradGuard no_grad;
  BackboneStepStats stats;
  const torch::Tensor& grads = params_->grads();
  const double sum_sq = grads.device().is_cpu()
                            ? kernels::SumOfSquares(grads.data_ptr<float>(), grads.numel())
                            : grads.pow(2).sum().to(torch::kDouble).item<double>();
  stats.grad_norm = std::sqrt(sum_sq) * grad_scale;
  if (options_.grad_clip_norm > 0) {
    const double coef = options_.grad_clip_norm / (stats.grad_norm + 1e-6);
    if (coef < 1) stats.clip_coef = coef;
  }
  return stats;
}

BackboneStepStats BackboneAdamW::Step(double lr, double grad_scale) {
  const BackboneStepStats stats = Measure(grad_scale);
  Apply(lr, grad_scale, stats);
  return stats;
}

StatusOr<BackboneStepStats> BackboneAdamW::CheckedStep(double lr, double grad_scale) {
  MLCD_RETURN_IF_ERROR(CheckLearningRate(lr));
  const BackboneStepStats stats = Measure(grad_scale);
  if (!std::isfinite(stats.grad_norm)) return NonFiniteGradient(stats.grad_norm);
  Apply(lr, grad_scale, stats);
  return stats;
}

void BackboneAdamW::Apply(double lr, double grad_scale, const BackboneStepStats& stats) {
  torch::NoGradGuard no_grad;
  const torch::Tensor& values = params_->values();
  const AdamWKernel kernel = ChosenAdamWKernel(options_.kernel, values.device());
  const double scale = grad_scale * stats.clip_coef;
  // kFused reads the gradient's divisor from a device tensor: a fill, no copy from the host
  // that the stream would wait for.
  torch::Tensor divisor;
  if (kernel == AdamWKernel::kFused) divisor = torch::full({}, 1.0 / scale, values.options());
  UpdateGroups(lr, kernel, scale, divisor, torch::Tensor());
  ++step_;
}

StatusOr<PendingBackboneStep> BackboneAdamW::StepOnDevice(double lr, double grad_scale) {
  MLCD_RETURN_IF_ERROR(CheckLearningRate(lr));
  torch::NoGradGuard no_grad;
  const torch::Tensor& values = params_->values();
  const AdamWKernel kernel = ChosenAdamWKernel(options_.kernel, values.device());
  PendingBackboneStep pending;
  if (kernel != AdamWKernel::kFused) {
    StatusOr<BackboneStepStats> checked = CheckedStep(lr, grad_scale);
    pending.checked = checked.status();
    if (checked.ok()) pending.checked_stats = *checked;
    pending.apply = torch::full({}, checked.ok(), values.options().dtype(torch::kBool));
    return pending;
  }
  // Measure's figures as device scalars (float64): the norm after grad_scale, the factor
  // that clips it to grad_clip_norm.
  const torch::Tensor norm = params_->grads().norm().to(torch::kDouble).mul_(grad_scale);
  const torch::Tensor clip = options_.grad_clip_norm > 0
                                 ? (options_.grad_clip_norm / (norm + 1e-6)).clamp_max_(1.0)
                                 : torch::ones_like(norm);
  pending.apply = norm.isfinite();
  pending.figures = torch::stack({norm, clip});
  const torch::Tensor divisor = (clip * grad_scale).reciprocal().to(torch::kFloat);
  UpdateGroups(lr, kernel, 0.0, divisor, pending.apply.logical_not().to(torch::kFloat));
  return pending;
}

StatusOr<BackboneStepStats> BackboneAdamW::Settle(const PendingBackboneStep& pending) {
  if (!pending.figures.defined()) {
    if (!pending.checked.ok()) return pending.checked;
    return pending.checked_stats;
  }
  const torch::Tensor figures = pending.figures.cpu();
  BackboneStepStats stats;
  stats.grad_norm = figures[0].item<double>();
  stats.clip_coef = figures[1].item<double>();
  if (!std::isfinite(stats.grad_norm)) return NonFiniteGradient(stats.grad_norm);
  ++step_;
  return stats;
}

void BackboneAdamW::UpdateGroups(double lr, AdamWKernel kernel, double scale,
                                 const torch::Tensor& divisor, const torch::Tensor& skip) {
  torch::Tensor& values = params_->values();
  torch::Tensor& grads = params_->grads();
  const int64_t step = step_ + 1;
  // kFused reads the step count from a device tensor: a fill.
  const torch::Tensor step_count =
      kernel == AdamWKernel::kFused ? torch::full({}, static_cast<double>(step), values.options())
                                    : torch::Tensor();
  for (int g = 0; g < params_->num_groups(); ++g) {
    const int64_t begin = params_->group_begin(g), end = params_->group_end(g);
    if (begin == end) continue;
    const double wd =
        static_cast<size_t>(g) < options_.weight_decay.size() ? options_.weight_decay[g] : 0.0;
    if (kernel == AdamWKernel::kLoops) {
      kernels::AdamWHyper h;
      h.lr = static_cast<float>(lr);
      h.beta1 = static_cast<float>(options_.beta1);
      h.beta2 = static_cast<float>(options_.beta2);
      h.eps = static_cast<float>(options_.eps);
      h.weight_decay = static_cast<float>(wd);
      h.grad_scale = static_cast<float>(scale);
      h.step = step;
      kernels::AdamWUpdate(values.data_ptr<float>() + begin, grads.data_ptr<float>() + begin,
                           exp_avg_.data_ptr<float>() + begin,
                           exp_avg_sq_.data_ptr<float>() + begin, end - begin, h);
      continue;
    }
    auto p = values.slice(0, begin, end);
    auto m = exp_avg_.slice(0, begin, end);
    auto v = exp_avg_sq_.slice(0, begin, end);
    if (kernel == AdamWKernel::kFused) {
      compat::FusedAdamW(p, grads.slice(0, begin, end), m, v, step_count, lr, options_.beta1,
                         options_.beta2, wd, options_.eps, divisor, skip);
      continue;
    }
    auto gr = grads.slice(0, begin, end) * scale;
    const double bc1 = 1 - std::pow(options_.beta1, double(step));
    const double bc2 = 1 - std::pow(options_.beta2, double(step));
    p.mul_(1 - lr * wd);
    m.mul_(options_.beta1).add_(gr, 1 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(gr, gr, 1 - options_.beta2);
    auto denom = (v.sqrt() / std::sqrt(bc2)).add_(options_.eps);
    p.addcdiv_(m, denom, -lr / bc1);
  }
}

Status BackboneAdamW::LoadState(int64_t step, const torch::Tensor& exp_avg,
                                const torch::Tensor& exp_avg_sq) {
  if (exp_avg.numel() != exp_avg_.numel() || exp_avg_sq.numel() != exp_avg_sq_.numel()) {
    return Status::InvalidArgument("backbone optimizer state has " +
                                   std::to_string(exp_avg.numel()) + " values but the model has " +
                                   std::to_string(exp_avg_.numel()) +
                                   " parameters (checkpoint of a different model?)");
  }
  if (step < 0) return Status::InvalidArgument("backbone optimizer step must be >= 0");
  torch::NoGradGuard no_grad;
  exp_avg_.copy_(exp_avg.reshape({-1}));
  exp_avg_sq_.copy_(exp_avg_sq.reshape({-1}));
  step_ = step;
  return Status::Ok();
}

}  // namespace mlcd::worker
