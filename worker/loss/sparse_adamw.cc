#include "worker/loss/sparse_adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>

namespace mlcd::worker {

void SparseAdamWUpdate(const SparseAdamWOptions& o, double lr, const at::Tensor& rows_tensor,
                       const at::Tensor& grad_tensor, SparseAdamWState* state) {
  const int64_t m = rows_tensor.numel(), D = state->weight.size(1);
  const int64_t* rows = rows_tensor.data_ptr<int64_t>();
  const float* grad = grad_tensor.data_ptr<float>();
  float* w = state->weight.data_ptr<float>();
  float* m1 = state->exp_avg.data_ptr<float>();
  float* m2 = state->exp_avg_sq.data_ptr<float>();
  int64_t* steps = state->row_steps.data_ptr<int64_t>();
  const float beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - o.beta1),
              one_minus_b2 = static_cast<float>(1.0 - o.beta2);
  const float decay = static_cast<float>(1.0 - lr * o.weight_decay),
              eps = static_cast<float>(o.eps);
  at::parallel_for(0, m, 16, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t r = rows[k];
      const int64_t t = ++steps[r];
      const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
      const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
      const float step_size = static_cast<float>(lr / bias1);
      const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
      float* __restrict wr = w + r * D;
      float* __restrict ar = m1 + r * D;
      float* __restrict vr = m2 + r * D;
      const float* __restrict gr = grad + k * D;
      for (int64_t d = 0; d < D; ++d) {
        const float g = gr[d];
        const float a = beta1 * ar[d] + one_minus_b1 * g;
        const float v = beta2 * vr[d] + one_minus_b2 * g * g;
        ar[d] = a;
        vr[d] = v;
        wr[d] = wr[d] * decay - step_size * a / (std::sqrt(v) * inv_sqrt_bias2 + eps);
      }
    }
  });
}

void SparseAdamWUpdateTensors(const SparseAdamWOptions& o, double lr, const at::Tensor& rows,
                              const at::Tensor& grad, SparseAdamWState* state,
                              const at::Tensor& apply) {
  if (rows.numel() == 0) return;
  at::Tensor t = state->row_steps.index_select(0, rows).add_(1);
  // Per-row bias corrections in double, then one float32 factor each.
  at::Tensor td = t.to(at::kDouble);
  at::Tensor step_size = (lr / (1.0 - at::pow(o.beta1, td))).to(at::kFloat).unsqueeze(1);
  at::Tensor inv_sqrt_bias2 = (1.0 - at::pow(o.beta2, td)).rsqrt_().to(at::kFloat).unsqueeze(1);
  // Gathered rows updated in place, as torch.optim.AdamW does, then written back.
  at::Tensor a = state->exp_avg.index_select(0, rows);
  a.mul_(o.beta1).add_(grad, 1.0 - o.beta1);
  at::Tensor v = state->exp_avg_sq.index_select(0, rows);
  v.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
  at::Tensor denom = v.sqrt().mul_(inv_sqrt_bias2).add_(o.eps);
  at::Tensor w = state->weight.index_select(0, rows);
  w.mul_(1.0 - lr * o.weight_decay).addcdiv_(a * step_size, denom, -1.0);
  if (apply.defined()) {
    // The state is untouched until the writes below: the rows as they were, where not applied.
    t = at::where(apply, t, state->row_steps.index_select(0, rows));
    a = at::where(apply, a, state->exp_avg.index_select(0, rows));
    v = at::where(apply, v, state->exp_avg_sq.index_select(0, rows));
    w = at::where(apply, w, state->weight.index_select(0, rows));
  }
  state->row_steps.index_copy_(0, rows, t);
  state->exp_avg.index_copy_(0, rows, a);
  state->exp_avg_sq.index_copy_(0, rows, v);
  state->weight.index_copy_(0, rows, w);
}

}  // namespace mlcd::worker
