// MulCon's label-level embedding head (mulcon-contrastive-multilabel.txt Sec. 2.2; docs/loss.md,
// "Label heads"): learned label embeddings attend to the backbone's patch tokens and give one
// D-dimensional embedding per label and image, a classifier per label, and the projector of
// the label-level contrastive loss (worker/loss/llcl.h).
//
// With r_i [P, C] the image's patch tokens (VisionTransformerImpl::Features(..., patch_tokens)),
// U [L, C] the learned label embeddings, h heads:
//   MultiAtt(Q, K, V) = concat_h(softmax(Q W_h^q (K W_h^k)ᵀ / sqrt(d/h)) V W_h^v) W^o
//   MAB(Q, K)         = LN(Q' + ReLU(Q' W^f + b^f)),  Q' = LN(Q W^q + MultiAtt(Q, K, K))
//                       (paper Eq. 3, with the Set Transformer's ReLU in the second sum)
//   r_i = MAB_C→C(r_i, r_i);   g_i = MAB_C→D(U, r_i);   g_i = MAB_D→D(g_i, g_i)   (Eq. 6)
//   s_ij = w_j · g_ij + b_j                      the per-label classifiers (logits [B, L])
//   z_ij = W_2 ReLU(W_1 g_ij + b_1) + b_2        the projector, D → D → d_z (appendix A.1)
// Every linear map has a bias; LayerNorm eps 1e-5; d the block's output width (C or D).
//
// Parameter names (named_parameters(); exported with the prefix "mulcon_head.",
// docs/export.md):
//   label_embeddings [L, C];  classifier_weight [L, D];  classifier_bias [L]
//   token_attention.*, label_attention.*, label_self_attention.*: each MAB's
//     query/key/value/output/feedforward .weight [out, in] and .bias [out],
//     norm1/norm2 .weight and .bias [out]
//   projector_hidden.weight [D, D], .bias [D];  projector_out.weight [d_z, D], .bias [d_z]
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "common/status.h"

namespace mlcd::worker {

struct LabelAttentionOptions {
  int64_t token_dim = 192;       // C: the backbone's width (its patch tokens' size)
  int64_t num_labels = 10;       // L: the label set's class count
  int64_t label_dim = 256;       // D: one label-level embedding's size
  int64_t heads = 4;             // h: divides C and D
  int64_t projection_dim = 128;  // d_z: the contrastive space
};

// INVALID_ARGUMENT naming the field: a size < 1, or heads not dividing C or D.
Status ValidateLabelAttentionOptions(const LabelAttentionOptions& options);

// One multi-head attention block, MAB(Q, K) above: queries [B, n_q, in_q], keys and values
// [B, n_k, in_k] -> [B, n_q, out].
class AttentionBlockImpl : public torch::nn::Module {
 public:
  AttentionBlockImpl(int64_t query_dim, int64_t key_dim, int64_t out_dim, int64_t heads);
  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys);

 private:
  int64_t heads_;
  torch::nn::Linear query_{nullptr}, key_{nullptr}, value_{nullptr}, output_{nullptr},
      feedforward_{nullptr};
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
};
TORCH_MODULE(AttentionBlock);

struct LabelAttentionOutput {
  torch::Tensor embeddings;  // g [B, L, D]
  torch::Tensor logits;      // s [B, L]
};

class LabelAttentionHeadImpl : public torch::nn::Module {
 public:
  // Options validated by the caller (ValidateLabelAttentionOptions); float32 on the CPU,
  // initialised by ResetParameters(0).
  explicit LabelAttentionHeadImpl(const LabelAttentionOptions& options);

  // tokens [B, P, C] (any P >= 1) -> g and the classifiers' logits.
  LabelAttentionOutput forward(const torch::Tensor& tokens);
  // The projector: g [..., D] -> z [..., d_z].
  torch::Tensor Project(const torch::Tensor& embeddings);

  // From a generator seeded with `seed` alone (every rank starts from the same head): every
  // weight matrix and U uniform in ±1/sqrt(fan-in) (U's fan-in: C), biases 0, LayerNorms 1/0.
  void ResetParameters(uint64_t seed);

  const LabelAttentionOptions& options() const { return options_; }

 private:
  LabelAttentionOptions options_;
  torch::Tensor label_embeddings_, classifier_weight_, classifier_bias_;
  AttentionBlock token_attention_{nullptr}, label_attention_{nullptr},
      label_self_attention_{nullptr};
  torch::nn::Linear projector_hidden_{nullptr}, projector_out_{nullptr};
};
TORCH_MODULE(LabelAttentionHead);

}  // namespace mlcd::worker
