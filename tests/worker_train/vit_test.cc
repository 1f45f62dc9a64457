// The ViT (shapes, presets, the fused model against plain ATen and finite differences,
// forward-only features, the activations' type, the kernel choice). The fused kernels alone:
// fused_kernels_test.cc; the backbone's AdamW: backbone_optimizer_test.cc; the learning-rate
// schedule: lr_schedule_test.cc.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "tests/worker_train/small_vit.h"
#include "worker/model/vit.h"
#include "worker/model/vit_kernels.h"
#include "worker/torch_compat.h"
#include "worker/train/backbone_optimizer.h"

namespace mlcd::worker {
namespace {

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

TEST(VitOptionsTest, PresetsFollowTheSpecAndPaperTable8) {
  struct Expect {
    const char* preset;
    int width, depth, heads, patch, image, tokens;
  };
  for (const Expect& e :
       {Expect{"vit-tiny", 192, 6, 3, 7, 28, 17}, Expect{"vit-small", 384, 12, 6, 7, 28, 17},
        Expect{"vit-b32", 768, 12, 12, 32, 224, 50}, Expect{"vit-b16", 768, 12, 12, 16, 224, 197},
        Expect{"vit-l14", 1024, 24, 16, 14, 224, 257},
        Expect{"clip-b16", 768, 12, 12, 16, 224, 197},
        Expect{"clip-l14", 1024, 24, 16, 14, 224, 257},
        Expect{"clip-l14-336", 1024, 24, 16, 14, 336, 577}}) {
    v1::JobSpec spec;
    spec.mutable_model()->set_preset(e.preset);
    ApplyJobSpecDefaults(&spec);
    auto o = VitOptionsFromSpec(spec.model());
    ASSERT_TRUE(o.ok()) << e.preset << ": " << o.status().ToString();
    EXPECT_EQ(o->width, e.width) << e.preset;
    EXPECT_EQ(o->depth, e.depth) << e.preset;
    EXPECT_EQ(o->heads, e.heads) << e.preset;
    EXPECT_EQ(o->patch_size, e.patch) << e.preset;
    EXPECT_EQ(o->image_size, e.image) << e.preset;
    EXPECT_EQ(o->tokens(), e.tokens) << e.preset;
    EXPECT_EQ(o->embed_dim, 512) << e.preset;
    EXPECT_EQ(o->mlp_hidden(), 4 * e.width) << e.preset;
    // The CLIP twins: CLIP's layout and LayerNorm eps, the same sizes.
    const bool clip = std::string(e.preset).rfind("clip-", 0) == 0;
    EXPECT_EQ(o->layout, clip ? VitLayout::kClip : VitLayout::kVit) << e.preset;
    EXPECT_EQ(o->layer_norm_eps, clip ? kClipLayerNormEps : kVitLayerNormEps) << e.preset;
    EXPECT_EQ(o->activation, VitActivation::kGelu) << e.preset;
  }
}

TEST(VitOptionsTest, ClipLayoutHasClipsParametersAndRefusesWhatClipLacks) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("clip-tiny");
  spec.mutable_model()->set_activation("quick_gelu");
  ApplyJobSpecDefaults(&spec);
  auto o = VitOptionsFromSpec(spec.model());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->activation, VitActivation::kQuickGelu);
  VisionTransformer clip(*o), vit(SmallTestVit());
  auto names = [](VisionTransformer& m) {
    std::map<std::string, std::vector<int64_t>> out;
    for (const auto& item : m->named_parameters()) out[item.key()] = item.value().sizes().vec();
    return out;
  };
  auto c = names(clip), v = names(vit);
  EXPECT_EQ(c.count("patch_bias"), 0u);
  EXPECT_EQ(v.count("patch_bias"), 1u);
  EXPECT_EQ(c.at("pre_norm.weight"), std::vector<int64_t>({192}));
  EXPECT_EQ(v.count("pre_norm.weight"), 0u);
  EXPECT_NE(DescribeVitOptions(*o).find("CLIP layout, quick GELU"), std::string::npos);

  spec.mutable_model()->set_pooling("mean");
  o = VitOptionsFromSpec(spec.model());
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("model.layout \"clip\" pools the class token"),
            std::string::npos)
      << o.status().ToString();
  spec.mutable_model()->set_pooling("cls");
  spec.mutable_model()->set_stem("conv");
  EXPECT_FALSE(VitOptionsFromSpec(spec.model()).ok());
  spec.mutable_model()->set_stem("patch");
  spec.mutable_model()->set_layout("siglip");
  o = VitOptionsFromSpec(spec.model());
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("model.layout must be \"vit\" or \"clip\""),
            std::string::npos);
  spec.mutable_model()->set_layout("clip");
  spec.mutable_model()->set_activation("relu");
  EXPECT_FALSE(VitOptionsFromSpec(spec.model()).ok());
}

// The CLIP layout by hand: a LayerNorm on the embeddings (no patch bias), blocks, the class
// token through the final LayerNorm and the projection; and its gradient against central
// finite differences in double precision (reference path, quick GELU).
TEST(VitTest, ClipLayoutForwardByHandAndGradientByFiniteDifferences) {
  VitOptions o = SmallTestVit();
  o.layout = VitLayout::kClip;
  o.activation = VitActivation::kQuickGelu;
  o.layer_norm_eps = kClipLayerNormEps;
  o.depth = 1;
  o.kernels = VitKernels::kAten;
  VisionTransformer model(o);
  model->ResetParameters(5);
  model->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
  }
  torch::manual_seed(17);
  torch::Tensor x = torch::randn({2, 1, 28, 28}, torch::kDouble);
  auto params = model->named_parameters();
  {
    // Forward by hand.
    torch::NoGradGuard no_grad;
    torch::Tensor patches =
        x.reshape({2, 1, 4, 7, 4, 7}).permute({0, 2, 4, 1, 3, 5}).reshape({2, 16, 49});
    torch::Tensor t = torch::matmul(patches, params["patch_weight"].view({32, 49}).t());
    t = torch::cat({params["cls_token"].view({1, 1, 32}).expand({2, 1, 32}), t}, 1) +
        params["pos_embed"];
    auto ln = [&](const torch::Tensor& h, const std::string& name) {
      return torch::layer_norm(h, {32}, params[name + ".weight"], params[name + ".bias"], 1e-5);
    };
    t = ln(t, "pre_norm");
    std::vector<torch::Tensor> hidden = model->HiddenStates(x);
    ASSERT_EQ(hidden.size(), 2u);
    EXPECT_LT(MaxAbsDiff(hidden[0], t), 1e-12);
    torch::Tensor h = ln(t, "block0.norm1");
    torch::Tensor qkv = torch::linear(h, params["block0.qkv.weight"], params["block0.qkv.bias"]);
    torch::Tensor attn = ReferenceSelfAttention(qkv.reshape({34, 96}), 2, 4).view({2, 17, 32});
    t = t + torch::linear(attn, params["block0.proj.weight"], params["block0.proj.bias"]);
    h = torch::linear(ln(t, "block0.norm2"), params["block0.fc1.weight"],
                      params["block0.fc1.bias"]);
    h = h * torch::sigmoid(1.702 * h);
    t = t + torch::linear(h, params["block0.fc2.weight"], params["block0.fc2.bias"]);
    EXPECT_LT(MaxAbsDiff(hidden[1], t), 1e-12);
    torch::Tensor e = torch::matmul(ln(t.select(1, 0), "norm"), params["head"].t());
    EXPECT_LT(MaxAbsDiff(model->forward(x), e), 1e-12);
  }
  torch::Tensor w = torch::randn({2, 24}, torch::kDouble);
  auto loss = [&] { return (model->forward(x) * w).sum(); };
  loss().backward();
  for (const char* name : {"pre_norm.weight", "pre_norm.bias", "patch_weight", "cls_token",
                           "block0.fc1.weight", "block0.qkv.weight", "head"}) {
    torch::Tensor p = params[name];
    torch::Tensor flat = p.view({-1});
    for (int64_t i : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
      const double h = 1e-6;
      double plus, minus;
      {
        torch::NoGradGuard no_grad;
        const double v = flat[i].item<double>();
        flat[i] = v + h;
        plus = loss().item<double>();
        flat[i] = v - h;
        minus = loss().item<double>();
        flat[i] = v;
      }
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(p.grad().view({-1})[i].item<double>(), numeric,
                  1e-6 * std::max(1.0, std::abs(numeric)))
          << name << "[" << i << "]";
    }
  }
}

TEST(VitOptionsTest, BadSizesAreRejectedWithTheField) {
  v1::ModelSpec m;
  m.set_image_size(28);
  m.set_patch_size(7);
  m.set_channels(1);
  m.set_width(30);
  m.set_depth(1);
  m.set_heads(4);
  m.set_mlp_ratio(4);
  m.set_embed_dim(8);
  auto o = VitOptionsFromSpec(m);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("divisible by model.heads"), std::string::npos)
      << o.status().ToString();
  m.set_width(32);
  m.set_patch_size(5);
  o = VitOptionsFromSpec(m);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("model.patch_size"), std::string::npos);
  m.set_patch_size(7);
  m.set_pooling("max");
  o = VitOptionsFromSpec(m);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("model.pooling"), std::string::npos);
  m.set_pooling("mean");
  m.set_stem("convolution");
  o = VitOptionsFromSpec(m);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("model.stem"), std::string::npos);
  m.set_stem("conv");
  EXPECT_TRUE(VitOptionsFromSpec(m).ok());
  m.set_image_size(21);  // patch 7 -> 3 tokens per side; 3 halvings give ceil(21 / 8) = 3
  EXPECT_TRUE(VitOptionsFromSpec(m).ok());
  m.set_patch_size(3);  // 7 per side; 2 halvings give ceil(21 / 4) = 6
  o = VitOptionsFromSpec(m);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("model.stem \"conv\" cannot reach 7 tokens per side"),
            std::string::npos)
      << o.status().ToString();
  m.set_image_size(28);
  m.set_patch_size(7);
  m.set_depth(0);
  EXPECT_FALSE(VitOptionsFromSpec(m).ok());
}

TEST(VitTest, OutputShapesAndParameterCount) {
  for (VitPooling pooling : {VitPooling::kCls, VitPooling::kMean}) {
    VitOptions o = SmallTestVit(pooling);
    VisionTransformer model(o);
    torch::Tensor y = model->forward(torch::randn({5, 1, 28, 28}));
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{5, 24}));
    const int64_t d = 32, h = 128, tokens = o.tokens();
    const int64_t per_block =
        2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * h + h) + (h * d + d);
    const int64_t expected = (d * 49 + d) + (pooling == VitPooling::kCls ? d : 0) + tokens * d +
                             2 * per_block + 2 * d + 24 * d;
    EXPECT_EQ(model->NumParameters(), expected);
    EXPECT_EQ(
        static_cast<int64_t>(model->DecayParameters().size() + model->NoDecayParameters().size()),
        static_cast<int64_t>(model->parameters().size()));
  }
  // A larger image, 3 channels, patch 4.
  VitOptions o = SmallTestVit();
  o.image_size = 32;
  o.patch_size = 4;
  o.channels = 3;
  VisionTransformer model(o);
  EXPECT_EQ(model->forward(torch::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 24}));
  EXPECT_THROW(model->forward(torch::randn({2, 1, 32, 32})), c10::Error);
}

// The rest of SmallTestVit()'s forward pass (2 blocks, width 32, 4 heads, 17 tokens) from the
// embedded patches t [B, 16, 32], in plain ATen ops with the model's named parameters.
torch::Tensor ReferenceForwardFromPatches(torch::Tensor t,
                                          torch::OrderedDict<std::string, torch::Tensor>& params) {
  const int64_t batch = t.size(0);
  t = torch::cat({params["cls_token"].view({1, 1, 32}).expand({batch, 1, 32}), t}, 1) +
      params["pos_embed"];
  for (int b = 0; b < 2; ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    auto ln = [&](const torch::Tensor& v, const std::string& n) {
      return torch::layer_norm(v, {32}, params[p + n + ".weight"], params[p + n + ".bias"], 1e-6);
    };
    auto lin = [&](const torch::Tensor& v, const std::string& n) {
      return torch::linear(v, params[p + n + ".weight"], params[p + n + ".bias"]);
    };
    torch::Tensor qkv =
        lin(ln(t, "norm1"), "qkv").view({batch, 17, 3, 4, 8}).permute({2, 0, 3, 1, 4});
    torch::Tensor a =
        torch::softmax(torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(8.0), -1);
    torch::Tensor attn = torch::matmul(a, qkv[2]).permute({0, 2, 1, 3}).reshape({batch, 17, 32});
    t = t + lin(attn, "proj");
    t = t + lin(torch::gelu(lin(ln(t, "norm2"), "fc1")), "fc2");
  }
  torch::Tensor pooled =
      torch::layer_norm(t.select(1, 0), {32}, params["norm.weight"], params["norm.bias"], 1e-6);
  return torch::linear(pooled, params["head"]);
}

TEST(VitTest, PatchEmbeddingIsAStridedConvolution) {
  torch::manual_seed(127);
  // With depth-independent pieces isolated: the model's output for an image equals a
  // hand-built forward that uses torch::conv2d for the patch embedding and plain ATen ops.
  VitOptions o = SmallTestVit();
  o.kernels = VitKernels::kAten;
  VisionTransformer model(o);
  model->ResetParameters(3);
  torch::Tensor x = torch::randn({3, 1, 28, 28});
  auto params = model->named_parameters();
  torch::Tensor t =
      torch::conv2d(x, params["patch_weight"], params["patch_bias"], 7).flatten(2).transpose(1, 2);
  EXPECT_LT(MaxAbsDiff(model->forward(x), ReferenceForwardFromPatches(t, params)), 1e-5);
}

TEST(VitTest, ConvStemIsStridedConvolutionsThenAProjection) {
  torch::manual_seed(128);
  // 28 -> 14 -> 7 -> 4 by three 3x3 stride-2 convolutions (channels 8, 16, 32), each
  // followed by a one-group GroupNorm and GELU, then the 1x1 projection: the same 4x4 grid
  // as patch 7, on both the fused and the reference path.
  for (VitKernels impl : {VitKernels::kAten, VitKernels::kFused}) {
    VitOptions o = SmallTestVit();
    o.stem = VitStem::kConv;
    o.kernels = impl;
    EXPECT_EQ(o.stem_channels(), (std::vector<int>{8, 16, 32}));
    VisionTransformer model(o);
    model->ResetParameters(4);
    torch::Tensor x = torch::randn({3, 1, 28, 28});
    auto params = model->named_parameters();
    torch::Tensor h = x;
    for (int i = 0; i < 3; ++i) {
      const std::string n = "stem" + std::to_string(i);
      EXPECT_EQ(params[n + "_conv.weight"].sizes(),
                (std::vector<int64_t>{8 << i, i == 0 ? 1 : 4 << i, 3, 3}));
      h = torch::conv2d(h, params[n + "_conv.weight"], {}, 2, 1);
      h = torch::gelu(
          torch::group_norm(h, 1, params[n + "_norm.weight"], params[n + "_norm.bias"], 1e-5));
    }
    ASSERT_EQ(h.sizes(), (std::vector<int64_t>{3, 32, 4, 4}));
    torch::Tensor t =
        torch::conv2d(h, params["patch_weight"], params["patch_bias"]).flatten(2).transpose(1, 2);
    EXPECT_LT(MaxAbsDiff(model->forward(x), ReferenceForwardFromPatches(t, params)), 1e-5);
    // Gradients equal autograd's through the hand-built forward.
    torch::Tensor w = torch::randn({3, 24});
    (model->forward(x) * w).sum().backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& item : params) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      grads[item.key()] = item.value().grad().clone();
      item.value().mutable_grad().zero_();
    }
    {
      torch::Tensor h2 = x;
      for (int i = 0; i < 3; ++i) {
        const std::string n = "stem" + std::to_string(i);
        h2 = torch::conv2d(h2, params[n + "_conv.weight"], {}, 2, 1);
        h2 = torch::gelu(
            torch::group_norm(h2, 1, params[n + "_norm.weight"], params[n + "_norm.bias"], 1e-5));
      }
      torch::Tensor t2 = torch::conv2d(h2, params["patch_weight"], params["patch_bias"])
                             .flatten(2)
                             .transpose(1, 2);
      (ReferenceForwardFromPatches(t2, params) * w).sum().backward();
    }
    for (const auto& item : params) {
      const double scale = std::max(1e-3, item.value().grad().abs().max().item<double>());
      EXPECT_LT(MaxAbsDiff(grads[item.key()], item.value().grad()) / scale, 2e-5)
          << item.key() << ": max |grad| " << grads[item.key()].abs().max().item<double>() << " vs "
          << item.value().grad().abs().max().item<double>() << " by hand";
    }
    // He-scaled convolutions: std sqrt(2 / fan_in), truncated at 2 std (which keeps 0.88 of it).
    EXPECT_NEAR(params["stem1_conv.weight"].std().item<double>(), std::sqrt(2.0 / (8 * 9)) * 0.88,
                0.03);
    // Every stem parameter is trained: it gets a gradient (defined: checked above), and the
    // conv weights get decay.
    for (const auto& [name, grad] : grads) {
      if (name.rfind("stem", 0) == 0) {
        EXPECT_GT(grad.abs().sum().item<double>(), 0) << name;
      }
    }
    EXPECT_EQ(model->DecayParameters().size() + model->NoDecayParameters().size(),
              model->parameters().size());
    size_t conv_in_decay = 0;
    for (const auto& w : model->DecayParameters()) conv_in_decay += w.dim() == 4 && w.size(2) == 3;
    EXPECT_EQ(conv_in_decay, 3u);
  }
}

TEST(VitTest, FusedAndReferenceModelsAgreeInOutputAndGradients) {
  // The paper's layout with both stems, and the CLIP layout with each activation.
  struct Case {
    VitStem stem;
    VitLayout layout;
    VitActivation activation;
  };
  for (const Case& c : {Case{VitStem::kPatch, VitLayout::kVit, VitActivation::kGelu},
                        Case{VitStem::kConv, VitLayout::kVit, VitActivation::kGelu},
                        Case{VitStem::kPatch, VitLayout::kClip, VitActivation::kGelu},
                        Case{VitStem::kPatch, VitLayout::kClip, VitActivation::kQuickGelu}}) {
    SCOPED_TRACE(std::string(c.stem == VitStem::kConv ? "conv stem" : "patch stem") +
                 (c.layout == VitLayout::kClip ? ", CLIP layout" : "") +
                 (c.activation == VitActivation::kQuickGelu ? ", quick GELU" : ""));
    torch::manual_seed(125);
    VitOptions fused_o = SmallTestVit(), ref_o = SmallTestVit();
    fused_o.stem = ref_o.stem = c.stem;
    fused_o.layout = ref_o.layout = c.layout;
    fused_o.activation = ref_o.activation = c.activation;
    fused_o.kernels = VitKernels::kFused;
    ref_o.kernels = VitKernels::kAten;
    VisionTransformer fused(fused_o), ref(ref_o);
    fused->ResetParameters(7);
    ref->ResetParameters(7);
    torch::Tensor x = torch::randn({6, 1, 28, 28});
    torch::Tensor w = torch::randn({6, 24});
    (fused->forward(x) * w).sum().backward();
    (ref->forward(x) * w).sum().backward();
    auto fp = fused->named_parameters();
    auto rp = ref->named_parameters();
    for (const auto& item : rp) {
      EXPECT_LT(MaxAbsDiff(fp[item.key()], item.value()), 1e-7) << item.key();
      ASSERT_TRUE(fp[item.key()].grad().defined()) << item.key();
      const double scale = std::max(1e-3, item.value().grad().abs().max().item<double>());
      EXPECT_LT(MaxAbsDiff(fp[item.key()].grad(), item.value().grad()) / scale, 2e-5) << item.key();
    }
  }
}

// Embed, evaluation and extraction run under torch::NoGradGuard: the fused operations then
// take their forward-only variants (worker/model/fused_inference.h). Same features as the
// training forward, and no autograd state at all.
// The norm of a - b against the norm of b (float64).
double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item<double>();
}

// The activations take the images' type. float64 images run the float32 model in float64
// end to end: output and gradients equal the float32 run's to float32's rounding, which checks
// that every parameter is cast where it is used and its gradient comes back through the cast.
// bfloat16 images: every hidden state and feature is bfloat16, the float32 parameters get
// float32 gradients, and both follow the float32 run within bf16's rounding (8 significant
// bits: 2^-8 relative per value). The features within 2 %; the gradients within 10 %: each is
// a sum over every token of bf16 products, a LayerNorm bias's sum cancels most, and a bf16
// LayerNorm backward rounds its sums where autocast's float32 one does not. Either kernel
// choice runs ATen's operators for these types.
TEST(VitTest, ActivationsTakeTheImagesTypeAndFollowTheFloat32Model) {
  struct Case {
    VitStem stem;
    VitPooling pooling;
    bool clip;  // the CLIP layout with quick GELU
    VitKernels kernels;
  };
  struct Type {
    torch::ScalarType type;
    double features, gradients;  // relative tolerances against the float32 run
  };
  for (const Case& c : {Case{VitStem::kPatch, VitPooling::kCls, false, VitKernels::kAuto},
                        Case{VitStem::kConv, VitPooling::kMean, false, VitKernels::kFused},
                        Case{VitStem::kPatch, VitPooling::kCls, true, VitKernels::kAten}}) {
    for (const Type& type : {Type{torch::kDouble, 1e-5, 1e-4}, Type{torch::kBFloat16, 2e-2, 0.1}}) {
      SCOPED_TRACE(std::string(c.stem == VitStem::kConv ? "conv" : "patch") + " stem, " +
                   (c.pooling == VitPooling::kCls ? "cls" : "mean") + " pooling" +
                   (c.clip ? ", CLIP layout, quick GELU" : "") + ", kernels " +
                   VitKernelsName(c.kernels) + ", " + c10::toString(type.type));
      torch::manual_seed(43);
      VitOptions o = SmallTestVit(c.pooling);
      o.stem = c.stem;
      o.kernels = c.kernels;
      if (c.clip) {
        o.layout = VitLayout::kClip;
        o.activation = VitActivation::kQuickGelu;
      }
      VisionTransformer model(o);
      model->ResetParameters(11);
      const torch::Tensor x = torch::randn({6, 1, 28, 28}), xt = x.to(type.type);
      for (const torch::Tensor& state : model->HiddenStates(xt))
        EXPECT_EQ(state.scalar_type(), type.type);
      for (VitFeatures kind : {VitFeatures::kEmbedding, VitFeatures::kBlocks, VitFeatures::kTokens,
                               VitFeatures::kPooled}) {
        torch::NoGradGuard no_grad;
        const torch::Tensor ft = model->Features(xt, kind, 2), f32 = model->Features(x, kind, 2);
        EXPECT_EQ(ft.scalar_type(), type.type) << VitFeaturesName(kind);
        EXPECT_LT(RelativeError(ft, f32), type.features) << VitFeaturesName(kind);
      }
      // Gradients: the same weighted sum of the output through each type.
      const torch::Tensor w = torch::randn({6, 24});
      std::map<std::string, torch::Tensor> grads32;
      (model->forward(x) * w).sum().backward();
      for (const auto& item : model->named_parameters()) {
        grads32[item.key()] = item.value().grad().clone();
        item.value().mutable_grad().zero_();
      }
      const torch::Tensor out = model->forward(xt);
      EXPECT_EQ(out.scalar_type(), type.type);
      (out.to(torch::kFloat) * w).sum().backward();
      for (const auto& item : model->named_parameters()) {
        EXPECT_EQ(item.value().scalar_type(), torch::kFloat) << item.key();
        const torch::Tensor& g = item.value().grad();
        ASSERT_TRUE(g.defined()) << item.key();
        EXPECT_EQ(g.scalar_type(), torch::kFloat) << item.key();
        EXPECT_LT(RelativeError(g, grads32[item.key()]), type.gradients) << item.key();
      }
    }
  }
}

TEST(VitTest, ForwardOnlyGivesTheTrainingForwardsFeatures) {
  struct Case {
    VitStem stem;
    VitPooling pooling;
    bool clip;  // the CLIP layout with quick GELU
  };
  for (const Case& c : {Case{VitStem::kPatch, VitPooling::kCls, false},
                        Case{VitStem::kPatch, VitPooling::kMean, false},
                        Case{VitStem::kConv, VitPooling::kCls, false},
                        Case{VitStem::kConv, VitPooling::kMean, false},
                        Case{VitStem::kPatch, VitPooling::kCls, true}}) {
    const VitStem stem = c.stem;
    const VitPooling pooling = c.pooling;
    SCOPED_TRACE(std::string(stem == VitStem::kConv ? "conv" : "patch") + " stem, " +
                 (pooling == VitPooling::kCls ? "cls" : "mean") + " pooling" +
                 (c.clip ? ", CLIP layout, quick GELU" : ""));
    torch::manual_seed(41);
    VitOptions o = SmallTestVit(pooling);
    o.stem = stem;
    o.kernels = VitKernels::kFused;
    if (c.clip) {
      o.layout = VitLayout::kClip;
      o.activation = VitActivation::kQuickGelu;
    }
    VisionTransformer model(o);
    model->ResetParameters(9);
    torch::Tensor x = torch::randn({5, 1, 28, 28});
    for (VitFeatures kind : {VitFeatures::kEmbedding, VitFeatures::kBlocks, VitFeatures::kTokens,
                             VitFeatures::kPooled}) {
      torch::Tensor training = model->Features(x, kind, 2);
      ASSERT_TRUE(training.requires_grad());  // the training forward built a graph
      torch::Tensor forward_only;
      {
        torch::NoGradGuard no_grad;
        forward_only = model->Features(x, kind, 2);
      }
      EXPECT_FALSE(forward_only.requires_grad());
      EXPECT_FALSE(forward_only.grad_fn());
      EXPECT_EQ(forward_only.sizes(), training.sizes());
      EXPECT_LE(MaxAbsDiff(forward_only, training.detach()), 1e-5) << VitFeaturesName(kind);
    }
  }
}

TEST(VitTest, DirectGradientAccumulationIntoFlatBuffersMatchesAutograd) {
  torch::manual_seed(126);
  // With FlatParameters every Linear writes its weight/bias gradient straight into the flat
  // buffer; two backward passes must accumulate exactly like autograd's own accumulation.
  VitOptions fused_o = SmallTestVit(), ref_o = SmallTestVit();
  fused_o.kernels = VitKernels::kFused;
  ref_o.kernels = VitKernels::kAten;
  VisionTransformer fused(fused_o), ref(ref_o);
  fused->ResetParameters(5);
  ref->ResetParameters(5);
  FlatParameters flat({fused->DecayParameters(), fused->NoDecayParameters()});
  torch::Tensor w = torch::randn({4, 24});
  for (int pass = 0; pass < 2; ++pass) {
    torch::Tensor x = torch::randn({4, 1, 28, 28});
    (fused->forward(x) * w).sum().backward();
    (ref->forward(x) * w).sum().backward();
  }
  auto fp = fused->named_parameters();
  for (const auto& item : ref->named_parameters()) {
    const torch::Tensor& g = fp[item.key()].grad();
    ASSERT_TRUE(g.defined()) << item.key();
    // Still a view of the flat gradient buffer.
    EXPECT_GE(g.data_ptr<float>(), flat.grads().data_ptr<float>()) << item.key();
    EXPECT_LT(g.data_ptr<float>(), flat.grads().data_ptr<float>() + flat.numel()) << item.key();
    const double scale = std::max(1e-3, item.value().grad().abs().max().item<double>());
    EXPECT_LT(MaxAbsDiff(g, item.value().grad()) / scale, 2e-5) << item.key();
  }
  flat.ZeroGrad();
  EXPECT_EQ(flat.grads().abs().sum().item<double>(), 0.0);
}

TEST(VitTest, EvaluationFeaturesFollowTheirDefinitions) {
  torch::manual_seed(3);
  VitOptions o = SmallTestVit();  // depth 2, width 32, cls pooling
  VisionTransformer model(o);
  model->ResetParameters(5);
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor images = torch::randn({4, 1, 28, 28});
  const auto params = model->named_parameters();

  // The embedding is forward(); the pooled token projects onto it through the head.
  torch::Tensor embedding = model->forward(images);
  EXPECT_LT(MaxAbsDiff(model->Features(images, VitFeatures::kEmbedding), embedding), 1e-6);
  torch::Tensor also;
  torch::Tensor pooled = model->Features(images, VitFeatures::kPooled, 4, &also);
  EXPECT_EQ(pooled.sizes(), (std::vector<int64_t>{4, 32}));
  EXPECT_LT(MaxAbsDiff(torch::matmul(pooled, params["head"].t()), embedding), 1e-5);
  EXPECT_LT(MaxAbsDiff(also, embedding), 1e-6);
  // Final LayerNorm with weight 1, bias 0 at initialisation: zero mean per row.
  EXPECT_LT(pooled.mean(1).abs().max().item<double>(), 1e-5);

  auto unit = [](const torch::Tensor& t) { return t / t.norm(2, {1}, true); };
  // One block: [LN(cls), LN(mean patch token)], each unit norm / sqrt(2).
  torch::Tensor one = model->Features(images, VitFeatures::kBlocks, 1);
  EXPECT_EQ(one.size(1), model->FeatureDim(VitFeatures::kBlocks, 1));
  EXPECT_EQ(one.size(1), 64);
  EXPECT_LT(MaxAbsDiff(one.narrow(1, 0, 32) * std::sqrt(2.0), unit(pooled)), 1e-5);
  EXPECT_LT(MaxAbsDiff(one.norm(2, {1}), torch::ones({4})), 1e-5);

  // Both blocks: the first part is the class token after block 0 through the final
  // LayerNorm, i.e. the pooled feature of the same model cut to depth 1.
  torch::Tensor two = model->Features(images, VitFeatures::kBlocks, 2);
  EXPECT_EQ(two.size(1), 96);
  VitOptions cut_options = o;
  cut_options.depth = 1;
  VisionTransformer cut(cut_options);
  cut->eval();
  for (auto& item : cut->named_parameters()) item.value().copy_(params[item.key()]);
  torch::Tensor cut_pooled = cut->Features(images, VitFeatures::kPooled);
  EXPECT_LT(MaxAbsDiff(two.narrow(1, 0, 32) * std::sqrt(3.0), unit(cut_pooled)), 1e-5);
  EXPECT_LT(MaxAbsDiff(two.narrow(1, 32, 64) * std::sqrt(3.0), one * std::sqrt(2.0)), 1e-5);
  EXPECT_THROW(model->Features(images, VitFeatures::kBlocks, 3), c10::Error);

  // Mean pooling has no separate patch-token part.
  VisionTransformer mean_model(SmallTestVit(VitPooling::kMean));
  mean_model->eval();
  EXPECT_EQ(mean_model->FeatureDim(VitFeatures::kBlocks, 2), 64);
  EXPECT_EQ(mean_model->Features(images, VitFeatures::kBlocks, 2).size(1), 64);

  // Tokens: the class part is the pooled feature, every part has norm 1/sqrt(T).
  const int64_t t = o.tokens();
  torch::Tensor tokens = model->Features(images, VitFeatures::kTokens);
  EXPECT_EQ(tokens.size(1), model->FeatureDim(VitFeatures::kTokens));
  EXPECT_EQ(tokens.size(1), 32 * t);
  EXPECT_LT(MaxAbsDiff(tokens.narrow(1, 0, 32) * std::sqrt(static_cast<double>(t)), unit(pooled)),
            1e-5);
  EXPECT_LT(
      MaxAbsDiff(tokens.view({4, t, 32}).norm(2, {2}), torch::full({4, t}, 1.0 / std::sqrt(t))),
      1e-5);
  EXPECT_LT(MaxAbsDiff(tokens.norm(2, {1}), torch::ones({4})), 1e-5);
  EXPECT_EQ(mean_model->FeatureDim(VitFeatures::kTokens), 32 * 16);

  EXPECT_EQ(*ParseVitFeatures("blocks"), VitFeatures::kBlocks);
  EXPECT_EQ(*ParseVitFeatures("tokens"), VitFeatures::kTokens);
  EXPECT_STREQ(VitFeaturesName(VitFeatures::kTokens), "tokens");
  EXPECT_STREQ(VitFeaturesName(VitFeatures::kPooled), "pooled");
  auto bad = ParseVitFeatures("cls");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// With every residual branch zeroed the blocks are the identity, so the token features are
// the patch embedding worked by hand: stride-p convolution + bias, class token, position
// embedding, final LayerNorm (random weight and bias), each token unit norm / sqrt(T), in
// raster order.
TEST(VitTest, TokenFeaturesOfIdentityBlocksAreTheNormalisedPatchEmbedding) {
  torch::manual_seed(4);
  for (VitKernels kernels : {VitKernels::kFused, VitKernels::kAten}) {
    VitOptions o = SmallTestVit();
    o.kernels = kernels;
    VisionTransformer model(o);
    model->ResetParameters(6);
    model->eval();
    torch::NoGradGuard no_grad;
    auto params = model->named_parameters();
    for (int i = 0; i < o.depth; ++i) {
      const std::string block = "block" + std::to_string(i) + ".";
      for (const char* name : {"proj.weight", "proj.bias", "fc2.weight", "fc2.bias"})
        params[block + name].zero_();
    }
    params["norm.weight"].copy_(torch::rand({o.width}) + 0.5);
    params["norm.bias"].copy_(torch::randn({o.width}));
    torch::Tensor images = torch::randn({3, 1, 28, 28});

    const int64_t t = o.tokens(), d = o.width;
    torch::Tensor grid =
        torch::conv2d(images, params["patch_weight"], params["patch_bias"], o.patch_size);
    torch::Tensor x = grid.flatten(2).transpose(1, 2);  // [B, 16, d], raster order
    x = torch::cat({params["cls_token"].view({1, 1, d}).expand({3, 1, d}), x}, 1) +
        params["pos_embed"];
    x = torch::layer_norm(x, {d}, params["norm.weight"], params["norm.bias"], o.layer_norm_eps);
    torch::Tensor expected =
        (x / x.norm(2, {2}, true) / std::sqrt(static_cast<double>(t))).reshape({3, t * d});

    EXPECT_LT(MaxAbsDiff(model->Features(images, VitFeatures::kTokens), expected), 1e-5);
  }
}

TEST(VitTest, InitialisationIsDeterministicPerSeed) {
  VisionTransformer a(SmallTestVit()), b(SmallTestVit()), c(SmallTestVit());
  a->ResetParameters(11);
  b->ResetParameters(11);
  c->ResetParameters(12);
  auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  bool any_diff = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i], pb[i]));
    any_diff |= !torch::equal(pa[i], pc[i]);
  }
  EXPECT_TRUE(any_diff);
  // Truncated normal: no weight beyond 2 sigma.
  EXPECT_LE(a->named_parameters()["block0.fc1.weight"].abs().max().item<double>(), 0.04 + 1e-7);
}

// kAuto is the fused CPU kernels with libtorch 1.x only: 2.x's CPU operators are faster
// (bench/RESULTS.md "Backbone kernels"), and a non-CPU device has ATen's only. A forced
// choice stays as asked.
TEST(VitTest, KernelChoiceFollowsTheBuildAndTheDevice) {
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
  const VitKernels cpu_choice = TORCH_VERSION_MAJOR >= 2 ? VitKernels::kAten : VitKernels::kFused;
  EXPECT_EQ(ChosenVitKernels(VitKernels::kAuto, cpu), cpu_choice);
  EXPECT_EQ(ChosenVitKernels(VitKernels::kAuto, cuda), VitKernels::kAten);
  EXPECT_EQ(ChosenVitKernels(VitKernels::kFused, cpu), VitKernels::kFused);
  EXPECT_EQ(ChosenVitKernels(VitKernels::kAten, cpu), VitKernels::kAten);
  EXPECT_EQ(std::string(VitKernelsName(ChosenVitKernels(VitKernels::kAuto, cpu))),
            TORCH_VERSION_MAJOR >= 2 ? "aten" : "fused");
  // The default model runs the chosen kernels: its output equals that choice's, bit for bit.
  torch::manual_seed(8);
  VitOptions chosen_o = SmallTestVit(), forced_o = SmallTestVit();
  forced_o.kernels = cpu_choice;
  VisionTransformer chosen(chosen_o), forced(forced_o);
  torch::Tensor x = torch::randn({3, 1, 28, 28});
  EXPECT_TRUE(torch::equal(chosen->forward(x), forced->forward(x)));
}

}  // namespace
}  // namespace mlcd::worker
