// The differences between the two libtorch flavours the worker is built against, in one place
// (docs/torch-builds.md): Debian's CPU libtorch 1.13 (the default build) and the `torch`
// wheel's libtorch 2.x with CUDA and NCCL (scripts/setup.sh with MLCD_TORCH=pip). Everything
// else in worker/ is written once for both; code that needs one of these differences calls
// this header instead of testing the version itself.
//
//   c10d:      since 2.0 a process group's transport (Gloo, NCCL) is a c10d::Backend; in 1.13
//              ProcessGroupGloo/ProcessGroupNCCL are themselves c10d::ProcessGroups.
//   attention: at::scaled_dot_product_attention (2.0+: flash / memory-efficient kernels on
//              CUDA, a fused math kernel on CPU); 1.13 has none, so softmax(q·kᵀ/√d)·v by ATen.
//   autocast:  the per-device dtype setter moved (1.13: set_autocast_gpu_dtype; 2.4+:
//              set_autocast_dtype(device type, dtype)).
//   AdamW:     at::_fused_adamw_ (one kernel per tensor list: CUDA since 2.0, CPU since 2.4);
//              1.13 has none.
//   NCCL env:  NCCL_BLOCKING_WAIT became TORCH_NCCL_BLOCKING_WAIT (2.2+), likewise the async
//              error handling switch.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/version.h>

#define MLCD_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||       \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace mlcd::worker::compat {

// The type of a Gloo or NCCL process group object (what ProcessGroupGloo derives from).
#if MLCD_TORCH_AT_LEAST(2, 0)
using C10dGroup = ::c10d::Backend;
#else
using C10dGroup = ::c10d::ProcessGroup;
#endif
using C10dGroupPtr = c10::intrusive_ptr<C10dGroup>;

// The environment variables that make ProcessGroupNCCL's wait() block and honour the timeout
// (renamed with a TORCH_ prefix in 2.2; the old names are deprecated there).
#if MLCD_TORCH_AT_LEAST(2, 2)
inline constexpr const char* kNcclBlockingWaitEnv = "TORCH_NCCL_BLOCKING_WAIT";
inline constexpr const char* kNcclAsyncErrorHandlingEnv = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
#else
inline constexpr const char* kNcclBlockingWaitEnv = "NCCL_BLOCKING_WAIT";
inline constexpr const char* kNcclAsyncErrorHandlingEnv = "NCCL_ASYNC_ERROR_HANDLING";
#endif

// "1.13.1", "2.11.0": the libtorch this binary was compiled against.
const char* TorchVersion();

// True when ScaledDotProductAttention uses libtorch's fused operator (2.0+).
bool HasFusedAttention();

// softmax(q·kᵀ / sqrt(head_dim))·v for q, k, v of shape [B, H, T, head_dim] (any device and
// floating dtype; the result has q's dtype). With libtorch 2.0+ this is
// at::scaled_dot_product_attention, which dispatches to flash / memory-efficient kernels on
// CUDA; otherwise ATen matmul + softmax.
at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// While alive, ATen's autocast is enabled for `device_type` (CUDA or CPU) with `dtype` (bf16 /
// fp16); the previous state is restored and the autocast cache cleared on destruction.
// Disabled scopes (enabled == false) do nothing. Not copyable; one thread.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device_type, at::ScalarType dtype, bool enabled);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_type_;
  bool enabled_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

// True when autocast is enabled for `device_type` on this thread (tests of the policy).
bool AutocastEnabled(c10::DeviceType device_type);

// True when FusedAdamW runs on tensors of `device_type` with this build.
bool HasFusedAdamW(c10::DeviceType device_type);

// One AdamW update (torch.optim.AdamW's: decoupled weight decay, bias-corrected moments) of the
// float tensor `param` from `grad / grad_divisor`, in at::_fused_adamw_'s one pass. `step` is a
// float scalar tensor on param's device holding the step count this update is (>= 1);
// `grad_divisor` a float scalar tensor there. `grad` may hold the divided gradient afterwards.
// With `skip` (a float scalar tensor there), nothing changes where it holds 1: the kernel reads
// it on the device. Only where HasFusedAdamW(param's device type).
void FusedAdamW(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const at::Tensor& step, double lr, double beta1,
                double beta2, double weight_decay, double eps, const at::Tensor& grad_divisor,
                const at::Tensor& skip = at::Tensor());

}  // namespace mlcd::worker::compat
