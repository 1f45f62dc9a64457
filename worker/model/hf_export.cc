#include "worker/model/hf_export.h"

#include <filesystem>
#include <map>

#include "common/file_util.h"
#include "worker/model/safetensors.h"

namespace mlcd::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The file names from_pretrained looks for in a directory.
constexpr char kHfWeightsFile[] = "model.safetensors";
constexpr char kHfConfigFile[] = "config.json";

const char* ActivationName(VitActivation activation) {
  return activation == VitActivation::kQuickGelu ? "quick_gelu" : "gelu";
}

// Renames our tensors (NativeStateDict) into the format's names. `take` moves one of ours
// under a new name (reshaped when `shape` is given); `qkv` splits a fused [3D, D] projection
// (or [3D] bias) into its q, k, v parts.
class Renamer {
 public:
  explicit Renamer(VisionTransformerImpl& model) {
    for (auto& t : NativeStateDict(model)) ours_[t.name] = t.value;
  }
  Status Take(const std::string& theirs, const std::string& name, std::vector<int64_t> shape = {}) {
    auto it = ours_.find(name);
    if (it == ours_.end())
      return Status::Internal("export: the model has no parameter \"" + name + "\"");
    out_.push_back({theirs, shape.empty() ? it->second : it->second.view(shape)});
    return Status::Ok();
  }
  Status Split(const std::string& name, const std::string (&theirs)[3]) {
    auto it = ours_.find(name);
    if (it == ours_.end())
      return Status::Internal("export: the model has no parameter \"" + name + "\"");
    const int64_t d = it->second.size(0) / 3;
    for (int64_t k = 0; k < 3; ++k)
      out_.push_back({theirs[k], it->second.narrow(0, k * d, d).contiguous()});
    return Status::Ok();
  }
  void Add(const std::string& theirs, torch::Tensor value) { out_.push_back({theirs, value}); }
  std::vector<ExportTensor> Release() { return std::move(out_); }

 private:
  std::map<std::string, torch::Tensor> ours_;
  std::vector<ExportTensor> out_;
};

// Our block<i>'s names -> theirs, for each (ours, theirs) suffix pair; `attn` the prefix of
// q/k/v (the fused qkv is split).
Status RenameBlock(Renamer& r, int i, const std::string& prefix,
                   const std::vector<std::pair<const char*, const char*>>& pairs,
                   const std::string (&q_k_v)[3]) {
  const std::string ours = "block" + std::to_string(i) + ".";
  for (const auto& [from, to] : pairs) MLCD_RETURN_IF_ERROR(r.Take(prefix + to, ours + from));
  for (const char* part : {"weight", "bias"}) {
    const std::string theirs[3] = {prefix + q_k_v[0] + "." + part, prefix + q_k_v[1] + "." + part,
                                   prefix + q_k_v[2] + "." + part};
    MLCD_RETURN_IF_ERROR(r.Split(ours + "qkv." + part, theirs));
  }
  return Status::Ok();
}

// ViTModel's tensors, each name after `base` ("" for ViTModel itself, "vit." inside
// ViTForImageClassification); our projection becomes the pooler or the classifier.
StatusOr<std::vector<ExportTensor>> VitStateDict(VisionTransformerImpl& model, bool classifier) {
  const VitOptions& o = model.options();
  const int64_t d = o.width;
  const std::string base = classifier ? "vit." : "";
  Renamer r(model);
  MLCD_RETURN_IF_ERROR(r.Take(base + "embeddings.cls_token", "cls_token", {1, 1, d}));
  MLCD_RETURN_IF_ERROR(
      r.Take(base + "embeddings.position_embeddings", "pos_embed", {1, o.tokens(), d}));
  MLCD_RETURN_IF_ERROR(
      r.Take(base + "embeddings.patch_embeddings.projection.weight", "patch_weight"));
  MLCD_RETURN_IF_ERROR(r.Take(base + "embeddings.patch_embeddings.projection.bias", "patch_bias"));
  const std::vector<std::pair<const char*, const char*>> pairs = {
      {"norm1.weight", "layernorm_before.weight"},
      {"norm1.bias", "layernorm_before.bias"},
      {"proj.weight", "attention.output.dense.weight"},
      {"proj.bias", "attention.output.dense.bias"},
      {"norm2.weight", "layernorm_after.weight"},
      {"norm2.bias", "layernorm_after.bias"},
      {"fc1.weight", "intermediate.dense.weight"},
      {"fc1.bias", "intermediate.dense.bias"},
      {"fc2.weight", "output.dense.weight"},
      {"fc2.bias", "output.dense.bias"},
  };
  const std::string q_k_v[3] = {"attention.attention.query", "attention.attention.key",
                                "attention.attention.value"};
  for (int i = 0; i < o.depth; ++i) {
    MLCD_RETURN_IF_ERROR(
        RenameBlock(r, i, base + "encoder.layer." + std::to_string(i) + ".", pairs, q_k_v));
  }
  MLCD_RETURN_IF_ERROR(r.Take(base + "layernorm.weight", "norm.weight"));
  MLCD_RETURN_IF_ERROR(r.Take(base + "layernorm.bias", "norm.bias"));
  const std::string projection = classifier ? "classifier" : "pooler.dense";
  MLCD_RETURN_IF_ERROR(r.Take(projection + ".weight", "head"));
  r.Add(projection + ".bias", torch::zeros({o.embed_dim}, torch::kFloat));
  return r.Release();
}

StatusOr<std::vector<ExportTensor>> ClipStateDict(VisionTransformerImpl& model) {
  const VitOptions& o = model.options();
  Renamer r(model);
  const std::string v = "vision_model.";
  MLCD_RETURN_IF_ERROR(r.Take(v + "embeddings.class_embedding", "cls_token"));
  MLCD_RETURN_IF_ERROR(r.Take(v + "embeddings.patch_embedding.weight", "patch_weight"));
  MLCD_RETURN_IF_ERROR(r.Take(v + "embeddings.position_embedding.weight", "pos_embed"));
  MLCD_RETURN_IF_ERROR(r.Take(v + "pre_layrnorm.weight", "pre_norm.weight"));
  MLCD_RETURN_IF_ERROR(r.Take(v + "pre_layrnorm.bias", "pre_norm.bias"));
  const std::vector<std::pair<const char*, const char*>> pairs = {
      {"norm1.weight", "layer_norm1.weight"},
      {"norm1.bias", "layer_norm1.bias"},
      {"proj.weight", "self_attn.out_proj.weight"},
      {"proj.bias", "self_attn.out_proj.bias"},
      {"norm2.weight", "layer_norm2.weight"},
      {"norm2.bias", "layer_norm2.bias"},
      {"fc1.weight", "mlp.fc1.weight"},
      {"fc1.bias", "mlp.fc1.bias"},
      {"fc2.weight", "mlp.fc2.weight"},
      {"fc2.bias", "mlp.fc2.bias"},
  };
  const std::string q_k_v[3] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"};
  for (int i = 0; i < o.depth; ++i) {
    MLCD_RETURN_IF_ERROR(
        RenameBlock(r, i, v + "encoder.layers." + std::to_string(i) + ".", pairs, q_k_v));
  }
  MLCD_RETURN_IF_ERROR(r.Take(v + "post_layernorm.weight", "norm.weight"));
  MLCD_RETURN_IF_ERROR(r.Take(v + "post_layernorm.bias", "norm.bias"));
  MLCD_RETURN_IF_ERROR(r.Take("visual_projection.weight", "head"));
  return r.Release();
}

// The config keys both classes share.
json CommonConfig(const VitOptions& o) {
  return {{"hidden_size", o.width},
          {"num_hidden_layers", o.depth},
          {"num_attention_heads", o.heads},
          {"intermediate_size", o.mlp_hidden()},
          {"hidden_act", ActivationName(o.activation)},
          {"layer_norm_eps", o.layer_norm_eps},
          {"image_size", o.image_size},
          {"patch_size", o.patch_size},
          {"num_channels", o.channels},
          {"initializer_range", 0.02},
          {"dtype", "float32"}};
}

}  // namespace

const char* HfModelClass(ExportFormat format) {
  switch (format) {
    case ExportFormat::kHfClip:
      return "CLIPVisionModelWithProjection";
    case ExportFormat::kHfVitClassifier:
      return "ViTForImageClassification";
    default:
      return "ViTModel";
  }
}

Status CheckHfExpressible(ExportFormat format, const VitOptions& o) {
  const bool clip = format == ExportFormat::kHfClip;
  const std::string cls = HfModelClass(format);
  std::vector<std::string> differences;
  if (!clip && o.layout == VitLayout::kClip)
    differences.push_back("model.layout is \"clip\" (" + cls +
                          " has no LayerNorm after the embeddings and a patch-embedding bias; "
                          "--format hf-clip writes this layout)");
  if (clip && o.layout == VitLayout::kVit)
    differences.push_back(
        "model.layout is \"vit\" (CLIP's vision tower has a LayerNorm after the embeddings and "
        "no patch-embedding bias; --format hf-vit writes this layout, or train with "
        "model.layout \"clip\", e.g. preset clip-b16)");
  if (o.stem != VitStem::kPatch)
    differences.push_back("model.stem is \"conv\" (" + cls +
                          " embeds patches with one stride-p convolution)");
  if (o.pooling != VitPooling::kCls)
    differences.push_back("model.pooling is \"mean\" (" + cls + " pools the class token)");
  if (differences.empty()) return Status::Ok();
  std::string message = "transformers' " + cls + " cannot express this model: ";
  for (size_t i = 0; i < differences.size(); ++i) message += (i ? "; " : "") + differences[i];
  return Status::FailedPrecondition(
      message + ". --format safetensors exports any model (our own tensor names)");
}

StatusOr<std::vector<ExportTensor>> HfStateDict(ExportFormat format, VisionTransformerImpl& model) {
  MLCD_RETURN_IF_ERROR(CheckHfExpressible(format, model.options()));
  if (format == ExportFormat::kHfClip) return ClipStateDict(model);
  return VitStateDict(model, format == ExportFormat::kHfVitClassifier);
}

json HfConfig(ExportFormat format, const VitOptions& o, const json& mlcd_config) {
  json config = CommonConfig(o);
  config["architectures"] = {HfModelClass(format)};
  json mlcd = mlcd_config;
  if (format == ExportFormat::kHfClip) {
    config["model_type"] = "clip_vision_model";
    config["projection_dim"] = o.embed_dim;
    config["attention_dropout"] = 0.0;
    config["initializer_factor"] = 1.0;
    mlcd["embedding"] =
        "image_embeds (visual_projection of post_layernorm(last_hidden_state[:, 0])), not "
        "L2-normalised; a LLaVA-style tower takes hidden_states[-2][:, 1:]";
  } else {
    config["model_type"] = "vit";
    config["qkv_bias"] = true;
    config["hidden_dropout_prob"] = 0.0;
    config["attention_probs_dropout_prob"] = 0.0;
    config["encoder_stride"] = o.patch_size;
    if (format == ExportFormat::kHfVitClassifier) {
      // Our projection is the classifier over the class token after the final LayerNorm,
      // one "label" per embedding dimension; the class has no pooler.
      config["num_labels"] = o.embed_dim;
      mlcd["embedding"] =
          "logits = classifier(last_hidden_state[:, 0]) = last_hidden_state[:, 0] @ "
          "classifier.weight.T (bias 0), not L2-normalised";
    } else {
      // Our projection is the pooler: a linear map of the class token, bias 0.
      config["pooler_output_size"] = o.embed_dim;
      config["pooler_act"] = "linear";
      mlcd["embedding"] =
          "pooler_output = model.pooler(last_hidden_state) = last_hidden_state[:, 0] @ "
          "pooler.dense.weight.T (bias 0, pooler_act linear), not L2-normalised";
    }
  }
  config["mlcd"] = mlcd;
  return config;
}

StatusOr<ExportResult> ExportHuggingFace(VisionTransformerImpl& model,
                                         const ExportSettings& settings, const std::string& out,
                                         const json& source) {
  const ExportFormat format = settings.format;
  if (settings.grey_as_rgb)
    return Status::InvalidArgument(
        "--grey-as-rgb is for --format torchvision; " + std::string(HfModelClass(format)) +
        " takes the model's own channel count (num_channels in config.json)");
  if (PathExists(out) && !IsDirectory(out))
    return Status::InvalidArgument("--out " + out + " is a file; --format " +
                                   ExportFormatName(format) +
                                   " writes a directory (config.json + model.safetensors)");
  MLCD_ASSIGN_OR_RETURN(std::vector<ExportTensor> tensors, HfStateDict(format, model));
  MLCD_RETURN_IF_ERROR(MakeDirs(out));
  ExportResult result;
  result.weights_path = (fs::path(out) / kHfWeightsFile).string();
  result.config_path = (fs::path(out) / kHfConfigFile).string();
  result.hf_class = HfModelClass(format);
  std::vector<SafetensorsTensor> st;
  for (const auto& t : tensors) {
    ++result.tensors;
    result.parameters += t.value.numel();
    st.push_back({t.name, t.value.sizes().vec(), t.value.data_ptr<float>()});
  }
  json ours = ExportConfig(model.options(), settings, false, source);
  ours["tensor_names"] = "transformers";
  result.config = HfConfig(format, model.options(), ours);
  MLCD_RETURN_IF_ERROR(WriteSafetensors(result.weights_path, st, {{"format", "pt"}}));
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(result.config_path, result.config.dump(2) + "\n"));
  return result;
}

}  // namespace mlcd::worker
