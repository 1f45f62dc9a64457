#include "worker/model/vit.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "worker/model/fused_inference.h"
#include "worker/model/vit_kernels.h"
#include "worker/torch_compat.h"

namespace mlcd::worker {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The conv stem's 3x3 stride-2 convolutions (vit.h), padded to halve the side exactly.
constexpr int64_t kStemKernel = 3;
constexpr int64_t kStemStride = 2;
constexpr int64_t kStemPadding = 1;

class FusedAttentionFunction : public torch::autograd::Function<FusedAttentionFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, int64_t batch,
                               int64_t heads) {
    torch::Tensor qkv = qkv_in.contiguous();
    const int64_t rows = qkv.size(0), width = qkv.size(1) / 3;
    const int64_t tokens = rows / batch, head_dim = width / heads;
    torch::Tensor out = torch::empty({rows, width}, qkv.options());
    torch::Tensor probs = torch::empty({batch, heads, tokens, tokens}, qkv.options());
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    if (qkv.scalar_type() == torch::kFloat) {
      kernels::AttentionForward(qkv.data_ptr<float>(), out.data_ptr<float>(),
                                probs.data_ptr<float>(), batch, tokens, heads, head_dim,
                                static_cast<float>(scale));
    } else {
      kernels::AttentionForward(qkv.data_ptr<double>(), out.data_ptr<double>(),
                                probs.data_ptr<double>(), batch, tokens, heads, head_dim, scale);
    }
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["batch"] = batch;
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& qkv = saved[0];
    const torch::Tensor& probs = saved[1];
    const int64_t batch = ctx->saved_data["batch"].toInt(),
                  heads = ctx->saved_data["heads"].toInt();
    const int64_t rows = qkv.size(0), width = qkv.size(1) / 3;
    const int64_t tokens = rows / batch, head_dim = width / heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    torch::Tensor grad_out = grad_outputs[0].contiguous();
    torch::Tensor grad_qkv = torch::empty_like(qkv);
    if (qkv.scalar_type() == torch::kFloat) {
      kernels::AttentionBackward(qkv.data_ptr<float>(), probs.data_ptr<float>(),
                                 grad_out.data_ptr<float>(), grad_qkv.data_ptr<float>(), batch,
                                 tokens, heads, head_dim, static_cast<float>(scale));
    } else {
      kernels::AttentionBackward(qkv.data_ptr<double>(), probs.data_ptr<double>(),
                                 grad_out.data_ptr<double>(), grad_qkv.data_ptr<double>(), batch,
                                 tokens, heads, head_dim, scale);
    }
    return {grad_qkv, torch::Tensor(), torch::Tensor()};
  }
};

// The CPU kernel of exact GELU or (quick) quick GELU, value and derivative in one pass.
void ActivationForward(const torch::Tensor& x, torch::Tensor& y, torch::Tensor& dydx, bool quick) {
  auto forward = quick ? kernels::QuickGeluForward : kernels::GeluForward;
  forward(x.data_ptr<float>(), y.data_ptr<float>(), dydx.data_ptr<float>(), x.numel());
}

class FusedGeluFunction : public torch::autograd::Function<FusedGeluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, bool quick) {
    torch::Tensor x = x_in.contiguous();
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor dydx = torch::empty_like(x);
    ActivationForward(x, y, dydx, quick);
    ctx->save_for_backward({dydx});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    return {grad_outputs[0] * saved[0], torch::Tensor()};
  }
};

// Accumulates dL/dW = g^T x and dL/db = column sums of g straight into the parameters'
// existing gradient tensors (the flat buffer of FlatParameters): no temporary weight
// gradient, no separate accumulation pass, the bias gradient in one pass. Returns the
// gradients autograd must accumulate itself (parameters without a gradient tensor yet).
void AccumulateLinearGradients(AutogradContext* ctx, const torch::Tensor& g, const torch::Tensor& x,
                               torch::Tensor* grad_w, torch::Tensor* grad_b) {
  if (ctx->needs_input_grad(1)) {
    torch::Tensor weight = ctx->saved_data["weight"].toTensor();
    torch::Tensor& acc = weight.mutable_grad();
    if (acc.defined() && acc.sizes() == weight.sizes() && acc.is_contiguous()) {
      acc.addmm_(g.t(), x);
    } else {
      *grad_w = torch::mm(g.t(), x);
    }
  }
  if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
    torch::Tensor bias = ctx->saved_data["bias"].toTensor();
    torch::Tensor& acc = bias.mutable_grad();
    if (acc.defined() && acc.is_contiguous() && g.scalar_type() == torch::kFloat &&
        g.device().is_cpu()) {
      kernels::AddColumnSums(g.data_ptr<float>(), g.size(0), g.size(1), acc.data_ptr<float>());
    } else {
      *grad_b = g.sum(0);
    }
  }
}

// LinearCompute with what the backward needs recorded in ctx.
torch::Tensor LinearForward(AutogradContext* ctx, const torch::Tensor& x,
                            const torch::Tensor& weight, const torch::Tensor& bias,
                            const torch::Tensor& residual) {
  // Function::apply takes defined tensors only: "absent" is an empty tensor.
  const bool has_bias = bias.numel() > 0;
  ctx->saved_data["weight"] = weight;
  ctx->saved_data["has_bias"] = has_bias;
  if (has_bias) ctx->saved_data["bias"] = bias;
  return LinearCompute(x, weight, bias, residual);
}

// y = x W^T + b (+ residual), x 2-D, with the backward above; the residual's gradient is
// the output gradient itself.
class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& residual) {
    ctx->save_for_backward({x});
    return LinearForward(ctx, x, weight, bias, residual);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    torch::Tensor g = grad_outputs[0].contiguous();
    torch::Tensor grad_x, grad_w, grad_b, grad_r;
    if (ctx->needs_input_grad(0)) grad_x = torch::mm(g, ctx->saved_data["weight"].toTensor());
    AccumulateLinearGradients(ctx, g, x, &grad_w, &grad_b);
    if (ctx->needs_input_grad(3)) grad_r = g;
    return {grad_x, grad_w, grad_b, grad_r};
  }
};

// [B, C, H, W] -> rows [B*H*W, C] (row b*H*W + y*W + x holds pixel (y, x) of sample b),
// with a backward that hands on a contiguous [B, C, H, W] gradient. Plain permute + reshape
// hands on a channels-last strided one, and with it this libtorch's CPU backward of the conv
// stem (GroupNorm / GELU against a contiguous input) gave garbage gradients (~1e25; the
// ConvStem test compares with autograd through a hand-built stem).
class FeatureMapToRowsFunction : public torch::autograd::Function<FeatureMapToRowsFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& map) {
    ctx->saved_data["sizes"] = map.sizes().vec();
    return map.permute({0, 2, 3, 1}).reshape({-1, map.size(1)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const std::vector<int64_t> s = ctx->saved_data["sizes"].toIntVector();
    return {grad_outputs[0].reshape({s[0], s[2], s[3], s[1]}).permute({0, 3, 1, 2}).contiguous()};
  }
};

// y = GELU(h) W^T + b + residual: the MLP's second half (quick GELU with `quick`). The
// activation and its derivative come from one pass; the backward forms
// dL/dh = (g W) * GELU'(h) in place in the fresh product.
class GeluLinearFunction : public torch::autograd::Function<GeluLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h_in,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& residual, bool quick) {
    torch::Tensor h = h_in.contiguous();
    torch::Tensor act = torch::empty_like(h);
    torch::Tensor dact = torch::empty_like(h);
    ActivationForward(h, act, dact, quick);
    ctx->save_for_backward({act, dact});
    return LinearForward(ctx, act, weight, bias, residual);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor g = grad_outputs[0].contiguous();
    torch::Tensor grad_h, grad_w, grad_b, grad_r;
    if (ctx->needs_input_grad(0))
      grad_h = torch::mm(g, ctx->saved_data["weight"].toTensor()).mul_(saved[1]);
    AccumulateLinearGradients(ctx, g, saved[0], &grad_w, &grad_b);
    if (ctx->needs_input_grad(3)) grad_r = g;
    return {grad_h, grad_w, grad_b, grad_r, torch::Tensor()};
  }
};

// The tensor a backward pass adds a parameter's gradient into: the parameter's existing
// gradient tensor (the flat buffer of FlatParameters) when it has a usable one, otherwise a
// fresh zero tensor, which also goes to *returned for autograd to accumulate.
torch::Tensor GradientAccumulator(const torch::Tensor& param, torch::Tensor* returned) {
  const torch::Tensor& acc = param.grad();
  if (acc.defined() && acc.sizes() == param.sizes() && acc.is_contiguous() &&
      acc.scalar_type() == param.scalar_type() && acc.device() == param.device()) {
    return acc;
  }
  *returned = torch::zeros_like(param);
  return *returned;
}

// LayerNorm over the last dimension. The forward keeps each row's mean and 1/std; the
// backward computes dx row by row and adds the gamma/beta gradients straight into the
// parameters' gradient tensors, like the Linear above.
class FusedLayerNormFunction : public torch::autograd::Function<FusedLayerNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
    torch::Tensor x = x_in.contiguous();
    torch::Tensor gamma = weight.contiguous(), beta = bias.contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor mean = torch::empty({rows}, x.options()),
                  rstd = torch::empty({rows}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "FusedLayerNorm", [&] {
      kernels::LayerNormForward(x.data_ptr<scalar_t>(), gamma.data_ptr<scalar_t>(),
                                beta.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                mean.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>(), rows, cols,
                                static_cast<scalar_t>(eps));
    });
    ctx->save_for_backward({x, gamma, mean, rstd});
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["bias"] = bias;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &gamma = saved[1], &mean = saved[2], &rstd = saved[3];
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    torch::Tensor g = grad_outputs[0].contiguous();
    // grad_*: what autograd gets back; dx/dw/db: where the kernel writes (undefined: not needed).
    torch::Tensor grad_x, grad_w, grad_b, dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = grad_x = torch::empty_like(x);
    if (ctx->needs_input_grad(1))
      dw = GradientAccumulator(ctx->saved_data["weight"].toTensor(), &grad_w);
    if (ctx->needs_input_grad(2))
      db = GradientAccumulator(ctx->saved_data["bias"].toTensor(), &grad_b);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "FusedLayerNormBackward", [&] {
      auto out = [](torch::Tensor& t) { return t.defined() ? t.data_ptr<scalar_t>() : nullptr; };
      kernels::LayerNormBackward(x.data_ptr<scalar_t>(), gamma.data_ptr<scalar_t>(),
                                 mean.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>(),
                                 g.data_ptr<scalar_t>(), out(dx), out(dw), out(db), rows, cols);
    });
    return {grad_x, grad_w, grad_b, torch::Tensor()};
  }
};

void TruncatedNormal(torch::Tensor& t, double std, at::Generator& gen) {
  t.normal_(0.0, std, gen);
  t.clamp_(-2 * std, 2 * std);
}

}  // namespace

torch::Tensor FusedSelfAttention(const torch::Tensor& qkv, int64_t batch, int64_t heads) {
  if (ForwardOnly()) return AttentionInference(qkv, batch, heads);
  return FusedAttentionFunction::apply(qkv, batch, heads);
}

torch::Tensor ReferenceSelfAttention(const torch::Tensor& qkv, int64_t batch, int64_t heads) {
  const int64_t rows = qkv.size(0), width = qkv.size(1) / 3;
  const int64_t tokens = rows / batch, head_dim = width / heads;
  auto parts = qkv.view({batch, tokens, 3, heads, head_dim}).permute({2, 0, 3, 1, 4}).unbind(0);
  // libtorch 2.x: scaled_dot_product_attention (flash / memory-efficient kernels on CUDA).
  return compat::ScaledDotProductAttention(parts[0], parts[1], parts[2])
      .permute({0, 2, 1, 3})
      .reshape({rows, width});
}

torch::Tensor FusedGelu(const torch::Tensor& x) {
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat)
    return ForwardOnly() ? GeluInference(x) : FusedGeluFunction::apply(x, false);
  return torch::gelu(x);
}

torch::Tensor FusedQuickGelu(const torch::Tensor& x) {
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat)
    return ForwardOnly() ? GeluInference(x, true) : FusedGeluFunction::apply(x, true);
  return ReferenceActivation(x, VitActivation::kQuickGelu);
}

torch::Tensor ReferenceActivation(const torch::Tensor& x, VitActivation activation) {
  if (activation == VitActivation::kGelu) return torch::gelu(x);
  return x * torch::sigmoid(x * kernels::kQuickGeluSlope);
}

torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps) {
  const bool fused = x.device().is_cpu() &&
                     (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble);
  if (!fused) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0 && weight.numel() == x.size(-1) &&
                  bias.numel() == x.size(-1) && weight.scalar_type() == x.scalar_type() &&
                  bias.scalar_type() == x.scalar_type(),
              "FusedLayerNorm: x ", x.sizes(), " ", x.scalar_type(),
              " needs weight and bias of its last size and type");
  if (ForwardOnly()) return LayerNormInference(x, weight, bias, eps);
  return FusedLayerNormFunction::apply(x, weight, bias, eps);
}

VisionTransformerImpl::VisionTransformerImpl(const VitOptions& options) : options_(options) {
  const int64_t d = options_.width, p = options_.patch_size;
  if (options_.stem == VitStem::kConv) {
    int64_t in = options_.channels;
    for (int channels : options_.stem_channels()) {
      StemLayer layer;
      const std::string name = "stem" + std::to_string(stem_.size());
      auto conv = torch::nn::Conv2dOptions(in, channels, kStemKernel)
                      .stride(kStemStride)
                      .padding(kStemPadding)
                      .bias(false);
      layer.conv = register_module(name + "_conv", torch::nn::Conv2d(conv));
      layer.norm = register_module(name + "_norm",
                                   torch::nn::GroupNorm(torch::nn::GroupNormOptions(1, channels)));
      stem_.push_back(layer);
      in = channels;
    }
    patch_weight_ = register_parameter("patch_weight", torch::empty({d, in, 1, 1}));
  } else {
    patch_weight_ = register_parameter("patch_weight", torch::empty({d, options_.channels, p, p}));
  }
  if (options_.layout == VitLayout::kVit)
    patch_bias_ = register_parameter("patch_bias", torch::empty({d}));
  if (options_.pooling == VitPooling::kCls)
    cls_token_ = register_parameter("cls_token", torch::empty({d}));
  pos_embed_ = register_parameter("pos_embed", torch::empty({options_.tokens(), d}));
  if (options_.layout == VitLayout::kClip) {
    pre_norm_ = register_module(
        "pre_norm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(options_.layer_norm_eps)));
  }
  for (int i = 0; i < options_.depth; ++i) {
    auto block =
        register_module("block" + std::to_string(i), std::make_shared<torch::nn::Module>());
    Block b;
    auto ln = torch::nn::LayerNormOptions({d}).eps(options_.layer_norm_eps);
    b.norm1 = block->register_module("norm1", torch::nn::LayerNorm(ln));
    b.qkv = block->register_module("qkv", torch::nn::Linear(d, 3 * d));
    b.proj = block->register_module("proj", torch::nn::Linear(d, d));
    b.norm2 = block->register_module("norm2", torch::nn::LayerNorm(ln));
    b.fc1 = block->register_module("fc1", torch::nn::Linear(d, options_.mlp_hidden()));
    b.fc2 = block->register_module("fc2", torch::nn::Linear(options_.mlp_hidden(), d));
    blocks_.push_back(b);
  }
  norm_ = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(options_.layer_norm_eps)));
  head_ = register_parameter("head", torch::empty({options_.embed_dim, d}));
  ResetParameters(0);
}

void VisionTransformerImpl::ResetParameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // Initialise on CPU in a fixed order, then copy: identical on every device and rank.
  auto init = [&](torch::Tensor& param, auto&& fill) {
    torch::Tensor cpu = torch::empty(param.sizes(), torch::kFloat);
    fill(cpu);
    param.copy_(cpu);
  };
  auto trunc = [&](double std) {
    return [&gen, std](torch::Tensor& t) { TruncatedNormal(t, std, gen); };
  };
  auto zeros = [](torch::Tensor& t) { t.zero_(); };
  auto ones = [](torch::Tensor& t) { t.fill_(1.0); };
  for (auto& layer : stem_) {
    // He initialisation for the GELU convolutions: std sqrt(2 / fan_in), fan_in = C_in * 9.
    const double fan_in = static_cast<double>(layer.conv->weight[0].numel());
    init(layer.conv->weight, trunc(std::sqrt(2.0 / fan_in)));
    init(layer.norm->weight, ones);
    init(layer.norm->bias, zeros);
  }
  init(patch_weight_, trunc(0.02));
  if (patch_bias_.defined()) init(patch_bias_, zeros);
  if (cls_token_.defined())
    init(cls_token_, [&gen](torch::Tensor& t) { t.normal_(0.0, 1e-6, gen); });
  init(pos_embed_, [&gen](torch::Tensor& t) { t.normal_(0.0, 0.02, gen); });
  if (pre_norm_) {
    init(pre_norm_->weight, ones);
    init(pre_norm_->bias, zeros);
  }
  for (auto& b : blocks_) {
    for (auto* ln : {&b.norm1, &b.norm2}) {
      init((*ln)->weight, ones);
      init((*ln)->bias, zeros);
    }
    for (auto* lin : {&b.qkv, &b.proj, &b.fc1, &b.fc2}) {
      init((*lin)->weight, trunc(0.02));
      init((*lin)->bias, zeros);
    }
  }
  init(norm_->weight, ones);
  init(norm_->bias, zeros);
  init(head_, [&gen, this](torch::Tensor& t) {
    t.normal_(0.0, 1.0 / std::sqrt(double(options_.width)), gen);
  });
}

namespace {

// `param` in the floating type of the activations `like`: without autocast the forward
// computes in its input's type (bfloat16 images: every activation bfloat16), and the cast's
// backward hands the float32 parameter a float32 gradient. Under autocast the parameters stay
// as they are, for autocast to cast where its policy says.
torch::Tensor As(const torch::Tensor& param, const torch::Tensor& like) {
  if (!param.defined() || param.scalar_type() == like.scalar_type() ||
      compat::AutocastEnabled(like.device().type())) {
    return param;
  }
  return param.to(like.scalar_type());
}

// y + residual. The sum is formed in place in the Linear's output y, which no backward function
// keeps -- unless autocast made y narrower than the residual stream (bf16 vs float32): then the
// stream stays float32, as PyTorch's `x = x + f(x)` under autocast.
torch::Tensor AddResidual(torch::Tensor y, const torch::Tensor& residual) {
  if (y.scalar_type() == residual.scalar_type()) return y.add_(residual);
  return residual + y;
}

}  // namespace

VitKernels ChosenVitKernels(VitKernels requested, const torch::Device& device) {
  if (requested != VitKernels::kAuto) return requested;
  return device.is_cpu() && !compat::HasFusedAttention() ? VitKernels::kFused : VitKernels::kAten;
}

const char* VitKernelsName(VitKernels kernels) {
  switch (kernels) {
    case VitKernels::kAuto:
      return "auto";
    case VitKernels::kFused:
      return "fused";
    case VitKernels::kAten:
      return "aten";
  }
  return "?";
}

bool VisionTransformerImpl::Fused(const torch::Tensor& t) const {
  // The fused kernels are float32 CPU code: under autocast (bf16) ATen's own ops run instead.
  return ChosenVitKernels(options_.kernels, t.device()) == VitKernels::kFused &&
         t.device().is_cpu() && t.scalar_type() == torch::kFloat &&
         !compat::AutocastEnabled(c10::DeviceType::CPU);
}

torch::Tensor VisionTransformerImpl::Linear(const torch::Tensor& x, const torch::Tensor& weight,
                                            const torch::Tensor& bias,
                                            const torch::Tensor& residual) {
  if (!Fused(x)) {
    torch::Tensor y = torch::linear(x, As(weight, x), As(bias, x));
    return residual.defined() ? AddResidual(y, residual) : y;
  }
  torch::Tensor none = torch::empty({0}, x.options());
  if (ForwardOnly()) {
    return LinearCompute(x.contiguous(), weight, bias.defined() ? bias.contiguous() : none,
                         residual.defined() ? residual : none);
  }
  return LinearFunction::apply(x, weight, bias.defined() ? bias : none,
                               residual.defined() ? residual : none);
}

torch::Tensor VisionTransformerImpl::LayerNorm(const torch::Tensor& x,
                                               const torch::nn::LayerNorm& norm) {
  if (Fused(x)) return FusedLayerNorm(x, norm->weight, norm->bias, options_.layer_norm_eps);
  return torch::layer_norm(x, {options_.width}, As(norm->weight, x), As(norm->bias, x),
                           options_.layer_norm_eps);
}

torch::Tensor VisionTransformerImpl::Attention(const torch::Tensor& qkv, int64_t batch) {
  // With libtorch 2.x, its scaled_dot_product_attention (a fused flash kernel on the CPU too)
  // is faster than ours (bench/RESULTS.md "Two libtorch builds"); ours serves 1.13.
  const bool fused = ChosenVitKernels(options_.kernels, qkv.device()) == VitKernels::kFused &&
                     qkv.device().is_cpu() &&
                     (qkv.scalar_type() == torch::kFloat || qkv.scalar_type() == torch::kDouble) &&
                     !compat::AutocastEnabled(c10::DeviceType::CPU) && !compat::HasFusedAttention();
  return fused ? FusedSelfAttention(qkv, batch, options_.heads)
               : ReferenceSelfAttention(qkv, batch, options_.heads);
}

torch::Tensor VisionTransformerImpl::BlockForward(const Block& b, torch::Tensor x, int64_t batch) {
  // x += proj(attention(LN1(x))): bias and residual are the initial value of the
  // projection's GEMM (fused path), so the sum costs no pass of its own.
  torch::Tensor h = LayerNorm(x, b.norm1);
  torch::Tensor qkv = Linear(h, b.qkv->weight, b.qkv->bias);
  x = Linear(Attention(qkv, batch), b.proj->weight, b.proj->bias, x);
  h = LayerNorm(x, b.norm2);
  return MlpOut(b, Linear(h, b.fc1->weight, b.fc1->bias), x);
}

torch::Tensor VisionTransformerImpl::MlpOut(const Block& b, const torch::Tensor& hidden,
                                            const torch::Tensor& x) {
  const bool quick = options_.activation == VitActivation::kQuickGelu;
  if (Fused(hidden) && ForwardOnly())
    return LinearCompute(GeluInference(hidden, quick), b.fc2->weight, b.fc2->bias, x);
  if (Fused(hidden)) return GeluLinearFunction::apply(hidden, b.fc2->weight, b.fc2->bias, x, quick);
  torch::Tensor act = ReferenceActivation(hidden, options_.activation);
  return AddResidual(torch::linear(act, As(b.fc2->weight, act), As(b.fc2->bias, act)), x);
}

torch::Tensor VisionTransformerImpl::Tokens(const torch::Tensor& images) {
  const auto& o = options_;
  TORCH_CHECK(images.dim() == 4 && images.size(1) == o.channels && images.size(2) == o.image_size &&
                  images.size(3) == o.image_size,
              "ViT expects images [B, ", o.channels, ", ", o.image_size, ", ", o.image_size,
              "], got ", images.sizes());
  const int64_t batch = images.size(0), g = o.patches_per_side(), p = o.patch_size, d = o.width;
  const int64_t n = o.num_patches(), t = o.tokens();
  torch::Tensor patches;
  if (o.stem == VitStem::kConv) {
    torch::Tensor h = images;
    for (auto& layer : stem_) {
      h = torch::conv2d(h, As(layer.conv->weight, h), {}, kStemStride, kStemPadding);
      h = torch::gelu(torch::group_norm(h, 1, As(layer.norm->weight, h), As(layer.norm->bias, h),
                                        layer.norm->options.eps()));
    }
    // [B, C', g, g] -> [B*n, C']: the 1x1 projection is one Linear.
    patches = FeatureMapToRowsFunction::apply(h);
  } else {
    // [B, C, g, p, g, p] -> [B, g, g, C, p, p] -> [B*n, C*p*p]: one Linear = stride-p conv.
    patches = images.reshape({batch, o.channels, g, p, g, p})
                  .permute({0, 2, 4, 1, 3, 5})
                  .reshape({batch * n, o.channels * p * p});
  }
  torch::Tensor x = Linear(patches, patch_weight_.view({d, -1}), patch_bias_).view({batch, n, d});
  if (o.pooling == VitPooling::kCls)
    x = torch::cat({As(cls_token_, x).view({1, 1, d}).expand({batch, 1, d}), x}, 1);
  x = (x + As(pos_embed_, x)).view({batch * t, d});
  return pre_norm_ ? LayerNorm(x, pre_norm_) : x;
}

std::vector<torch::Tensor> VisionTransformerImpl::HiddenStates(const torch::Tensor& images) {
  const int64_t batch = images.size(0), t = options_.tokens(), d = options_.width;
  torch::Tensor x = Tokens(images);
  std::vector<torch::Tensor> states = {x.view({batch, t, d})};
  for (const Block& b : blocks_) {
    x = BlockForward(b, x, batch);
    states.push_back(x.view({batch, t, d}));
  }
  return states;
}

torch::Tensor VisionTransformerImpl::Pool(const torch::Tensor& x, int64_t batch) const {
  const int64_t t = options_.tokens(), d = options_.width;
  return options_.pooling == VitPooling::kCls ? x.view({batch, t, d}).select(1, 0)
                                              : x.view({batch, t, d}).mean(1);
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& images) {
  return Features(images, VitFeatures::kEmbedding);
}

int64_t VisionTransformerImpl::FeatureDim(VitFeatures features, int blocks) const {
  switch (features) {
    case VitFeatures::kEmbedding:
      return options_.embed_dim;
    case VitFeatures::kPooled:
      return options_.width;
    case VitFeatures::kBlocks:
      return static_cast<int64_t>(options_.width) *
             (blocks + (options_.pooling == VitPooling::kCls ? 1 : 0));
    case VitFeatures::kTokens:
      return static_cast<int64_t>(options_.width) * options_.tokens();
  }
  return 0;
}

torch::Tensor VisionTransformerImpl::Features(const torch::Tensor& images, VitFeatures features,
                                              int blocks, torch::Tensor* embedding,
                                              torch::Tensor* patch_tokens) {
  const auto& o = options_;
  TORCH_CHECK(features != VitFeatures::kBlocks || (blocks >= 1 && blocks <= o.depth),
              "feature blocks ", blocks, " outside [1, ", o.depth, "]");
  const int64_t batch = images.size(0), d = o.width, t = o.tokens();
  torch::Tensor x = Tokens(images);
  std::vector<torch::Tensor> parts;
  const int first_kept = o.depth - blocks;
  for (int i = 0; i < o.depth; ++i) {
    x = BlockForward(blocks_[static_cast<size_t>(i)], x, batch);
    if (features == VitFeatures::kBlocks && i >= first_kept)
      parts.push_back(LayerNorm(Pool(x, batch), norm_));
  }
  if (patch_tokens) {
    const int64_t first_patch = o.pooling == VitPooling::kCls ? 1 : 0;
    *patch_tokens = LayerNorm(x, norm_).view({batch, t, d}).narrow(1, first_patch, o.num_patches());
  }
  torch::Tensor pooled = LayerNorm(Pool(x, batch), norm_);
  if (embedding || features == VitFeatures::kEmbedding) {
    torch::Tensor e = Linear(pooled, head_, torch::Tensor());
    if (embedding) *embedding = e;
    if (features == VitFeatures::kEmbedding) return e;
  }
  if (features == VitFeatures::kPooled) return pooled;
  if (features == VitFeatures::kTokens) {
    torch::Tensor tokens = LayerNorm(x, norm_).view({batch, t, d});
    tokens =
        tokens / tokens.norm(2, {2}, true).clamp_min(1e-12) / std::sqrt(static_cast<double>(t));
    return tokens.reshape({batch, t * d});
  }
  if (o.pooling == VitPooling::kCls) {
    torch::Tensor patch_mean = x.view({batch, t, d}).narrow(1, 1, t - 1).mean(1);
    parts.push_back(LayerNorm(patch_mean, norm_));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(parts.size()));
  for (auto& part : parts) part = part / part.norm(2, {1}, true).clamp_min(1e-12) * scale;
  return torch::cat(parts, 1);
}

std::vector<torch::Tensor> VisionTransformerImpl::DecayParameters() {
  std::vector<torch::Tensor> out;
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    bool matrix = item.value().dim() >= 2 && name != "pos_embed";
    if (matrix) out.push_back(item.value());
  }
  return out;
}

std::vector<torch::Tensor> VisionTransformerImpl::NoDecayParameters() {
  std::vector<torch::Tensor> out;
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    bool matrix = item.value().dim() >= 2 && name != "pos_embed";
    if (!matrix) out.push_back(item.value());
  }
  return out;
}

int64_t VisionTransformerImpl::NumParameters() {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace mlcd::worker
