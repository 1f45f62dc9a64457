// The vision transformer the worker trains (the backbone of MLCD, paper appendix A.2).
//
//   images [B, C, H, W] float
//     -> patch embedding (non-overlapping p x p patches, one Linear; same weights as a
//        stride-p Conv2d, stored in that [width, C, p, p] shape), or with the "conv" stem:
//        n = ceil(log2 p) x [3x3 stride-2 Conv2d (no bias) -> GroupNorm(1 group) -> GELU],
//        channels width/2^(n-1), ..., width/2, width, then a 1x1 projection (patch_weight
//        [width, width, 1, 1], patch_bias): the same (image/p)^2 tokens
//     -> + class token ("cls" pooling) and learned position embedding
//     -> (layout "clip" only) a LayerNorm: CLIP's "pre_layrnorm"
//     -> depth x pre-norm block:  x += proj(attention(LN1(x)));  x += fc2(act(fc1(LN2(x))))
//        (act: exact GELU, or quick GELU x * sigmoid(1.702 x))
//     -> pooling: the class token ("cls") or the mean of the patch tokens ("mean", no class
//        token at all)
//     -> final LayerNorm -> projection (no bias) to embed_dim.
// The output is NOT L2-normalised; the classification layer normalises it.
// Layout "clip" (VitLayout::kClip) is CLIP's vision tower: the LayerNorm after the
// embeddings, no patch-embedding bias, LayerNorm eps 1e-5, the class token and the patch stem
// (Hugging Face's CLIPVisionModelWithProjection computes the same: worker/model/hf_export.h).
//
// Activations take the images' floating type, the parameters theirs: with float32 images
// every activation is float32 (autocast, when on, narrows what its policy says); with
// bfloat16 images (training.precision "bf16-activations", worker/train/train_step.h) every
// activation is bfloat16 -- the residual stream, LayerNorm, GELU and attention outputs, and
// what autograd keeps for the backward -- each float32 parameter is cast at its use, and its
// gradient comes back float32. ATen's operators run bfloat16 on every device (the fused CPU
// kernels are float32 code).
// Kernels (VitOptions.kernels): the fused CPU kernels below, or ATen's operators; by default
// whichever this build runs faster on the device (ChosenVitKernels).
// The fused CPU kernels: activations stay 2-D ([B*T, width]) so every Linear is one GEMM; the
// attention reads q/k/v straight out of the fused qkv projection and writes heads already
// concatenated (no permutes or copies), with a hand-written forward/backward kernel
// (worker/model/vit_kernels.h) that keeps each (sample, head) in cache; GELU is computed once
// together with its derivative and fused with fc2; LayerNorm keeps each row's mean and 1/std
// and computes its input gradient in one pass per row; Linear and LayerNorm backward passes
// accumulate weight and bias gradients straight into the parameters' gradient tensors (no
// temporaries). Non-CPU tensors (CUDA) take ATen's operators, which are also what the tests
// compare the fused path with. With autograd off (torch::NoGradGuard, as
// embed / evaluation / extraction run) the fused operations run forward only
// (worker/model/fused_inference.h): no autograd nodes, no attention probabilities or GELU
// derivative kept.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd::worker {

enum class VitPooling { kCls, kMean };
// How images become tokens (ModelSpec.stem): kPatch "patch", kConv "conv" (see above).
enum class VitStem { kPatch, kConv };
// ModelSpec.layout: kVit "vit" (the paper's), kClip "clip" (CLIP's vision tower, see above).
enum class VitLayout { kVit, kClip };
// ModelSpec.activation: kGelu "gelu" (exact, erf), kQuickGelu "quick_gelu" (x sigmoid(1.702 x)).
enum class VitActivation { kGelu, kQuickGelu };

// The LayerNorm eps of each layout: 1e-6 (the paper's ViT, timm, torchvision) and 1e-5
// (CLIP's vision tower).
inline constexpr double kVitLayerNormEps = 1e-6;
inline constexpr double kClipLayerNormEps = 1e-5;
// What VisionTransformerImpl::Features() returns for evaluation and feature extraction.
enum class VitFeatures {
  kEmbedding,  // the projected embedding the loss sees (forward()), [B, embed_dim]
  kPooled,     // the pooled token after the final LayerNorm, before the projection, [B, width]
  // DINO's linear-evaluation features: the pooled token of each of the last `blocks` blocks
  // (class token, or mean of the tokens for "mean" pooling), each through the final
  // LayerNorm, plus (class-token models) the mean of the last block's patch tokens through
  // the same LayerNorm; every part L2-normalised, concatenated and scaled by
  // 1/sqrt(parts), so the row has unit norm. [B, width * parts]
  kBlocks,
  // Every token of the last block (class token first for "cls" pooling, then the patch
  // tokens in raster order), each through the final LayerNorm and L2-normalised,
  // concatenated and scaled by 1/sqrt(tokens), so the row has unit norm: the spatial layout
  // a linear probe on pixels sees, in the model's own features. [B, width * tokens]
  kTokens,
};

// "embedding", "pooled", "blocks", "tokens" (the spelling of EvaluationSpec.features).
StatusOr<VitFeatures> ParseVitFeatures(const std::string& name);
const char* VitFeaturesName(VitFeatures features);

// Which code runs the blocks' operations.
enum class VitKernels {
  // The faster of the two for this libtorch build and device (ChosenVitKernels): the fused
  // CPU kernels with libtorch 1.x, ATen's operators with 2.x and on every non-CPU device.
  kAuto,
  kFused,  // the fused CPU kernels (ATen's operators for non-CPU or non-float32 tensors)
  kAten,   // ATen's operators: linear, layer_norm, gelu, scaled_dot_product_attention (2.x)
};

// What kAuto resolves to on `device` with this build. The fused kernels were tuned against
// libtorch 1.13 and are faster there; 2.x's CPU operators (oneDNN GEMMs, the flash
// scaled_dot_product_attention, vectorised GELU and LayerNorm) are at least as fast, and they
// are the code every other device runs (bench/RESULTS.md "Backbone kernels"). kFused and kAten
// resolve to themselves.
VitKernels ChosenVitKernels(VitKernels requested, const torch::Device& device);
const char* VitKernelsName(VitKernels kernels);

struct VitOptions {
  int image_size = 28;
  int patch_size = 7;
  int channels = 1;
  int width = 192;
  int depth = 6;
  int heads = 3;
  // MLP hidden size = round(mlp_ratio * width).
  double mlp_ratio = 4.0;
  int embed_dim = 512;
  VitPooling pooling = VitPooling::kCls;
  VitStem stem = VitStem::kPatch;
  VitLayout layout = VitLayout::kVit;
  VitActivation activation = VitActivation::kGelu;
  double layer_norm_eps = kVitLayerNormEps;
  VitKernels kernels = VitKernels::kAuto;

  int patches_per_side() const { return image_size / patch_size; }
  int num_patches() const { return patches_per_side() * patches_per_side(); }
  // Sequence length inside the blocks (patches + class token for "cls" pooling).
  int tokens() const { return num_patches() + (pooling == VitPooling::kCls ? 1 : 0); }
  int head_dim() const { return width / heads; }
  // Channels of the conv stem's layers (empty for the patch stem): width >> (n - 1 - i).
  std::vector<int> stem_channels() const;
  int mlp_hidden() const;
};

// Checks sizes: all positive, width divisible by heads, image_size divisible by
// patch_size, a conv stem able to reach that grid (ConvStemLayers); the CLIP layout with
// class-token pooling and the patch stem only. INVALID_ARGUMENT naming the field otherwise.
Status ValidateVitOptions(const VitOptions& options);

// Options from a model spec on which ApplyJobSpecDefaults() has run (preset already folded
// in); validated. Layout "clip" sets layer_norm_eps to kClipLayerNormEps.
StatusOr<VitOptions> VitOptionsFromSpec(const v1::ModelSpec& spec);

// "vit-small: width 384, depth 12, heads 6, patch 7, image 28x28x1, embed 512, cls".
std::string DescribeVitOptions(const VitOptions& options);

class VisionTransformerImpl : public torch::nn::Module {
 public:
  explicit VisionTransformerImpl(const VitOptions& options);

  // images: [B, channels, image_size, image_size], float32 or bfloat16 (the activations'
  // type, above). Returns [B, embed_dim] of that type.
  torch::Tensor forward(const torch::Tensor& images);

  // Features of `images` for evaluation (see VitFeatures); `blocks` (kBlocks only) in
  // [1, depth]. With `embedding`, also stores forward()'s output there from the same pass;
  // with `patch_tokens`, the last block's patch tokens through the final LayerNorm,
  // [B, num_patches, width] (the class token left out; autograd graph kept).
  torch::Tensor Features(const torch::Tensor& images, VitFeatures features, int blocks = 4,
                         torch::Tensor* embedding = nullptr, torch::Tensor* patch_tokens = nullptr);
  // Columns of Features(.., features, blocks).
  int64_t FeatureDim(VitFeatures features, int blocks = 4) const;

  // The hidden states as Hugging Face's output_hidden_states gives them, [B, tokens, width]
  // each: [0] the block input (embeddings, after the CLIP layout's LayerNorm), [i] the output
  // of block i (no final LayerNorm); depth + 1 tensors. A LLaVA-style tower takes the patch
  // tokens of [depth - 1].
  std::vector<torch::Tensor> HiddenStates(const torch::Tensor& images);

  // Deterministic initialisation from `seed` (independent of the global torch RNG and of
  // the thread count): Linear/patch weights N(0, 0.02) truncated at 2 sigma, biases 0,
  // LayerNorm 1/0, position embedding N(0, 0.02), class token N(0, 1e-6), projection
  // N(0, width^-1/2). The constructor calls it with seed 0.
  void ResetParameters(uint64_t seed);

  const VitOptions& options() const { return options_; }
  // Parameters that get weight decay (weight matrices of Linear layers and the patch
  // embedding) and those that do not (biases, LayerNorm, class token, position embedding),
  // each in named_parameters() order.
  std::vector<torch::Tensor> DecayParameters();
  std::vector<torch::Tensor> NoDecayParameters();
  int64_t NumParameters();

 private:
  struct Block {
    torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
    torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
  };
  torch::Tensor BlockForward(const Block& block, torch::Tensor x, int64_t batch);
  // Patch embedding, class token and position embedding (and the CLIP layout's LayerNorm):
  // [B*T, width].
  torch::Tensor Tokens(const torch::Tensor& images);
  // The MLP's second half, x + fc2(act(hidden)), on the fused or the reference path.
  torch::Tensor MlpOut(const Block& block, const torch::Tensor& hidden, const torch::Tensor& x);
  // The token pooled as options().pooling says from x [B*T, width]: [B, width].
  torch::Tensor Pool(const torch::Tensor& x, int64_t batch) const;
  torch::Tensor Attention(const torch::Tensor& qkv, int64_t batch);
  // LayerNorm over the width with the module's weight and bias: FusedLayerNorm on the fused
  // path, at::layer_norm otherwise.
  torch::Tensor LayerNorm(const torch::Tensor& x, const torch::nn::LayerNorm& norm);
  // Whether the fused CPU kernels apply to tensors like t (kernels chosen kFused, CPU,
  // float32, no autocast).
  bool Fused(const torch::Tensor& t) const;
  // x W^T + b; with the fused path, the backward accumulates straight into the parameters'
  // gradient tensors (see FlatParameters).
  // With `residual`, returns residual + x W^T + b.
  torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight,
                       const torch::Tensor& bias, const torch::Tensor& residual = torch::Tensor());

  VitOptions options_;
  torch::Tensor patch_weight_;  // [width, channels, p, p]; conv stem: [width, width, 1, 1]
  torch::Tensor patch_bias_;    // [width]; undefined in the CLIP layout
  torch::Tensor cls_token_;     // [width] (cls pooling only)
  torch::Tensor pos_embed_;     // [tokens, width]
  std::vector<Block> blocks_;
  struct StemLayer {
    torch::nn::Conv2d conv{nullptr};
    torch::nn::GroupNorm norm{nullptr};
  };
  std::vector<StemLayer> stem_;             // conv stem only
  torch::nn::LayerNorm pre_norm_{nullptr};  // the CLIP layout's LayerNorm after the embeddings
  torch::nn::LayerNorm norm_{nullptr};
  torch::Tensor head_;  // [embed_dim, width]
};
TORCH_MODULE(VisionTransformer);

// The fused operations as autograd functions, exposed for tests and benchmarks.
// qkv [B*T, 3*width] -> [B*T, width]; CPU float or double.
torch::Tensor FusedSelfAttention(const torch::Tensor& qkv, int64_t batch, int64_t heads);
// The same with plain ATen ops (any device and dtype).
torch::Tensor ReferenceSelfAttention(const torch::Tensor& qkv, int64_t batch, int64_t heads);
// Exact GELU with the derivative saved in the forward pass; CPU float (other tensors use
// at::gelu).
torch::Tensor FusedGelu(const torch::Tensor& x);
// Quick GELU, x * sigmoid(1.702 x), with the derivative saved in the forward pass; CPU float
// (other tensors use ReferenceActivation).
torch::Tensor FusedQuickGelu(const torch::Tensor& x);
// The activation with plain ATen ops (any device and dtype).
torch::Tensor ReferenceActivation(const torch::Tensor& x, VitActivation activation);
// LayerNorm over the last dimension (weight and bias of that size) that keeps each row's
// mean and 1/std for the backward pass and adds the weight/bias gradients straight into
// their existing gradient tensors (see VisionTransformerImpl::Linear); CPU float or double
// (other tensors use at::layer_norm).
torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps);

}  // namespace mlcd::worker
