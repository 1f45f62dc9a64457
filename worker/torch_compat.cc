#include "worker/torch_compat.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <cmath>

namespace mlcd::worker::compat {

const char* TorchVersion() { return TORCH_VERSION; }

bool HasFusedAttention() { return MLCD_TORCH_AT_LEAST(2, 0); }

at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v) {
#if MLCD_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor probs = at::softmax(at::matmul(q, k.transpose(-2, -1)) * scale, -1);
  return at::matmul(probs, v);
#endif
}

bool HasFusedAdamW(c10::DeviceType device_type) {
  if (device_type == c10::DeviceType::CUDA) return MLCD_TORCH_AT_LEAST(2, 0);
  if (device_type == c10::DeviceType::CPU) return MLCD_TORCH_AT_LEAST(2, 4);
  return false;
}

void FusedAdamW(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const at::Tensor& step, double lr, double beta1,
                double beta2, double weight_decay, double eps, const at::Tensor& grad_divisor,
                const at::Tensor& skip) {
  TORCH_CHECK(HasFusedAdamW(param.device().type()), "FusedAdamW: libtorch ", TORCH_VERSION,
              " has no fused AdamW for ", param.device());
#if MLCD_TORCH_AT_LEAST(2, 0)
  at::_fused_adamw_({param}, {grad}, {exp_avg}, {exp_avg_sq}, {}, {step}, lr, beta1, beta2,
                    weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false, grad_divisor,
                    /*found_inf=*/skip.defined() ? c10::optional<at::Tensor>(skip) : c10::nullopt);
#else
  (void)grad, (void)exp_avg, (void)exp_avg_sq, (void)step, (void)lr, (void)beta1, (void)beta2,
      (void)weight_decay, (void)eps, (void)grad_divisor, (void)skip;
#endif
}

namespace {

#if MLCD_TORCH_AT_LEAST(2, 4)
bool IsEnabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void SetEnabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
at::ScalarType GetDtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void SetDtype(c10::DeviceType d, at::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
bool IsEnabled(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void SetEnabled(c10::DeviceType d, bool on) {
  if (d == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
}
at::ScalarType GetDtype(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                   : at::autocast::get_autocast_gpu_dtype();
}
void SetDtype(c10::DeviceType d, at::ScalarType t) {
  if (d == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(t);
  } else {
    at::autocast::set_autocast_gpu_dtype(t);
  }
}
#endif

}  // namespace

AutocastScope::AutocastScope(c10::DeviceType device_type, at::ScalarType dtype, bool enabled)
    : device_type_(device_type), enabled_(enabled) {
  if (!enabled_) return;
  previous_enabled_ = IsEnabled(device_type_);
  previous_dtype_ = GetDtype(device_type_);
  SetDtype(device_type_, dtype);
  SetEnabled(device_type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // The weight casts cached inside the region belong to it (as torch.autocast's exit).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetEnabled(device_type_, previous_enabled_);
  SetDtype(device_type_, previous_dtype_);
}

bool AutocastEnabled(c10::DeviceType device_type) { return IsEnabled(device_type); }

}  // namespace mlcd::worker::compat
