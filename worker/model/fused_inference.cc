#include "worker/model/fused_inference.h"

#include <cmath>

#include "worker/model/vit_kernels.h"

namespace mlcd::worker {

torch::Tensor LinearCompute(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, const torch::Tensor& residual) {
  const bool has_bias = bias.numel() > 0;
  const bool has_residual = residual.numel() > 0;
  if (!has_bias && !has_residual) return torch::mm(x, weight.t());
  torch::Tensor out = torch::empty({x.size(0), weight.size(0)}, x.options());
  torch::Tensor b = has_bias ? bias.contiguous() : torch::zeros({weight.size(0)}, x.options());
  torch::Tensor r = has_residual ? residual.contiguous() : torch::Tensor();
  kernels::FillBiasResidual(b.data_ptr<float>(), has_residual ? r.data_ptr<float>() : nullptr,
                            out.size(0), out.size(1), out.data_ptr<float>());
  return out.addmm_(x, weight.t());
}

torch::Tensor AttentionInference(const torch::Tensor& qkv_in, int64_t batch, int64_t heads) {
  torch::Tensor qkv = qkv_in.contiguous();
  const int64_t rows = qkv.size(0), width = qkv.size(1) / 3;
  const int64_t tokens = rows / batch, head_dim = width / heads;
  torch::Tensor out = torch::empty({rows, width}, qkv.options());
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (qkv.scalar_type() == torch::kFloat) {
    kernels::AttentionForward(qkv.data_ptr<float>(), out.data_ptr<float>(), nullptr, batch, tokens,
                              heads, head_dim, static_cast<float>(scale));
  } else {
    kernels::AttentionForward(qkv.data_ptr<double>(), out.data_ptr<double>(), nullptr, batch,
                              tokens, heads, head_dim, scale);
  }
  return out;
}

torch::Tensor GeluInference(const torch::Tensor& x_in, bool quick) {
  torch::Tensor x = x_in.contiguous();
  torch::Tensor y = torch::empty_like(x);
  auto forward = quick ? kernels::QuickGeluForward : kernels::GeluForward;
  forward(x.data_ptr<float>(), y.data_ptr<float>(), nullptr, x.numel());
  return y;
}

torch::Tensor LayerNormInference(const torch::Tensor& x_in, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps) {
  torch::Tensor x = x_in.contiguous();
  torch::Tensor gamma = weight.contiguous(), beta = bias.contiguous();
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  torch::Tensor y = torch::empty_like(x);
  // The row moments are written (the kernel's contract) and dropped.
  torch::Tensor moments = torch::empty({2, rows}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "LayerNormInference", [&] {
    kernels::LayerNormForward(x.data_ptr<scalar_t>(), gamma.data_ptr<scalar_t>(),
                              beta.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                              moments.data_ptr<scalar_t>(), moments.data_ptr<scalar_t>() + rows,
                              rows, cols, static_cast<scalar_t>(eps));
  });
  return y;
}

bool ForwardOnly() { return !torch::GradMode::is_enabled(); }

}  // namespace mlcd::worker
