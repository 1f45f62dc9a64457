// Encoders out: a trained ViT (worker/model/vit.h) as files other tools load.
//
//   torchvision   <out>.pt: a state_dict (torch.load gives a dict of tensors) that
//                 torchvision.models.VisionTransformer(image_size, patch_size, num_layers,
//                 num_heads, hidden_dim, mlp_dim, num_classes=embed_dim) loads with
//                 strict=True and then computes our embedding (the projection is heads.head,
//                 with a zero bias); <out stem>.json beside it holds the constructor arguments
//                 and the model config (ExportConfig below).
//   safetensors   <out>.safetensors: the same tensors under the same names, in the
//                 safetensors format (worker/model/safetensors.h), plus <out stem>.config.json
//                 beside it. A model torchvision cannot express keeps our own parameter names
//                 (VisionTransformerImpl::named_parameters()) there; the config says which
//                 ("tensor_names": "torchvision" | "mlcd").
//   hf-vit        <out>/ a directory transformers.ViTModel.from_pretrained loads strictly
//   hf-vit-classifier
//                 <out>/ the same for ViTForImageClassification: its logits are our
//                 embedding, and transformers 4.x before 4.48 loads it strictly too
//   hf-clip       <out>/ the same for CLIPVisionModelWithProjection (the "clip" layout); all
//                 three in worker/model/hf_export.h.
//
// The mapping onto torchvision 0.14's VisionTransformer (python3-torchvision in Debian 12):
//   cls_token [D]               -> class_token [1, 1, D]
//   patch_weight [D, 3, p, p]   -> conv_proj.weight (our Linear over patches flattened C,y,x
//   patch_bias                  -> conv_proj.bias    is that stride-p convolution)
//   pos_embed [T, D]            -> encoder.pos_embedding [1, T, D] (class token first)
//   block<i>.norm1 / norm2      -> encoder.layers.encoder_layer_<i>.ln_1 / ln_2
//   block<i>.qkv [3D, D] q;k;v  -> ...self_attention.in_proj_weight / in_proj_bias (same
//                                  layout: rows q, then k, then v; heads split each part)
//   block<i>.proj               -> ...self_attention.out_proj
//   block<i>.fc1 / fc2          -> ...mlp.0 / mlp.3 (exact erf GELU between them on both sides)
//   norm                        -> encoder.ln
//   head [E, D]                 -> heads.head.weight; heads.head.bias = 0 [E]
// Both sides are pre-norm with LayerNorm eps 1e-6, scale 1/sqrt(head_dim) attention, and
// pool the class token after the final LayerNorm.
#pragma once

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/model/vit.h"

namespace mlcd::worker {

enum class ExportFormat { kTorchvision, kSafetensors, kHfVit, kHfVitClassifier, kHfClip };

// "torchvision", "safetensors", "hf-vit", "hf-vit-classifier" or "hf-clip"; INVALID_ARGUMENT
// listing them otherwise.
StatusOr<ExportFormat> ParseExportFormat(const std::string& name);
const char* ExportFormatName(ExportFormat format);
// Whether the format is a transformers directory (hf_export.h).
bool IsHuggingFaceFormat(ExportFormat format);

// The LayerNorm eps of torchvision's VisionTransformer (its norm_layer default).
inline constexpr double kTorchvisionLayerNormEps = 1e-6;

// torchvision.models.VisionTransformer's constructor arguments for the same network.
struct TorchvisionVitArgs {
  int image_size = 0;
  int patch_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int hidden_dim = 0;
  int mlp_dim = 0;
  int num_classes = 0;  // our embed_dim: heads.head is the projection
};
nlohmann::json TorchvisionArgsJson(const TorchvisionVitArgs& args);
// "VisionTransformer(image_size=224, patch_size=16, ..., num_classes=512)".
std::string TorchvisionArgsCall(const TorchvisionVitArgs& args);

// OK when torchvision's VisionTransformer computes exactly what `options` describes;
// otherwise FAILED_PRECONDITION naming every difference (conv stem, mean pooling, channels
// other than 3, the CLIP layout, quick GELU, LayerNorm eps other than 1e-6) and what to do
// instead. With `grey_as_rgb`, a
// 1-channel model is expressible too (see TorchvisionStateDict).
Status CheckTorchvisionExpressible(const VitOptions& options, bool grey_as_rgb = false);
TorchvisionVitArgs TorchvisionArgs(const VitOptions& options);

// A named tensor of an export: contiguous float32 on the CPU, owning its memory.
struct ExportTensor {
  std::string name;
  torch::Tensor value;
};

// The state dict torchvision's VisionTransformer(TorchvisionArgs(model.options())) loads with
// strict=True, in its state_dict() order. CheckTorchvisionExpressible's error when it
// cannot. `grey_as_rgb` (1-channel models): conv_proj.weight holds a third of our patch
// weights on each of the 3 channels, so an image whose 3 channels all repeat the grey input
// (as preprocessed for our model) gives the same embedding.
StatusOr<std::vector<ExportTensor>> TorchvisionStateDict(VisionTransformerImpl& model,
                                                         bool grey_as_rgb = false);
// Our own parameter names and shapes (named_parameters() order).
std::vector<ExportTensor> NativeStateDict(VisionTransformerImpl& model);

struct ExportSettings {
  ExportFormat format = ExportFormat::kTorchvision;
  // Express a 1-channel model for 3-channel input that repeats the grey value (see
  // TorchvisionStateDict); INVALID_ARGUMENT for a model of another channel count.
  bool grey_as_rgb = false;
};

// What an export wrote.
struct ExportResult {
  std::string weights_path;  // the .pt or .safetensors file
  std::string config_path;   // the JSON beside it
  nlohmann::json config;     // its contents
  bool torchvision_names = false;
  TorchvisionVitArgs torchvision_args;  // when torchvision_names
  std::string hf_class;                 // hf-vit / hf-clip: the transformers class
  int64_t tensors = 0;
  int64_t parameters = 0;  // elements of all tensors
};

// The config written beside an export: format, tensor naming, torchvision constructor
// arguments (or why there are none), our model options and `source` (where the weights
// came from: checkpoint path, position).
nlohmann::json ExportConfig(const VitOptions& options, const ExportSettings& settings,
                            bool torchvision_names, const nlohmann::json& source);

// Writes `model` in settings.format to `out` (the .pt / .safetensors path; its directory is created)
// and the config beside it; for hf-vit / hf-clip `out` is the directory (ExportHuggingFace).
// FAILED_PRECONDITION for a model the format cannot express, INVALID_ARGUMENT for an `out`
// with a wrong extension or that is a directory.
StatusOr<ExportResult> ExportModel(VisionTransformerImpl& model, const ExportSettings& settings,
                                   const std::string& out, const nlohmann::json& source);

// Where the config of an export to `out` goes: <out without extension>.json for torchvision,
// <out without extension>.config.json for safetensors, <out>/config.json for hf-*.
std::string ExportConfigPath(ExportFormat format, const std::string& out);

}  // namespace mlcd::worker
