// The forward-only (inference) side of the ViT's fused CPU operations (worker/model/vit.h):
// what `mlcd-worker embed`, evaluation and feature extraction run. Autograd is off there
// (torch::NoGradGuard / c10::InferenceMode), so no autograd node is built and nothing a
// backward pass would need is computed or kept: no attention probabilities [B, H, T, T], no
// GELU derivative, no saved inputs. Same arithmetic as the training forward (tests compare
// the features: max abs difference <= 1e-5). CPU float tensors (attention and LayerNorm also
// double); the callers check that.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace mlcd::worker {

// Whether the fused operations run forward only: autograd is off.
bool ForwardOnly();

// out = residual + bias + x W^T as one in-place GEMM over an output pre-filled with
// residual + bias (either may be absent: an empty tensor); x 2-D contiguous. No autograd
// state (the training path records its backward around it).
torch::Tensor LinearCompute(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, const torch::Tensor& residual);

// softmax(scale * Q K^T) V from the fused qkv [B*T, 3*width]: [B*T, width].
torch::Tensor AttentionInference(const torch::Tensor& qkv, int64_t batch, int64_t heads);
// Exact GELU (kernels::GeluForward without the derivative); with `quick`, quick GELU
// (kernels::QuickGeluForward).
torch::Tensor GeluInference(const torch::Tensor& x, bool quick = false);
// LayerNorm over the last dimension (row moments not kept).
torch::Tensor LayerNormInference(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps);

}  // namespace mlcd::worker
