#include "worker/model/export.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "common/file_util.h"
#include "worker/model/hf_export.h"
#include "worker/model/safetensors.h"

namespace mlcd::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The parameter `name` of `model`, detached, as an owning contiguous float32 CPU tensor.
StatusOr<torch::Tensor> Param(const torch::OrderedDict<std::string, torch::Tensor>& params,
                              const std::string& name) {
  const torch::Tensor* t = params.find(name);
  if (!t) return Status::Internal("export: the model has no parameter \"" + name + "\"");
  return t->detach().to(torch::kCPU, torch::kFloat).contiguous().clone();
}

bool HasExtension(const std::string& path, const std::string& ext) {
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

// torch.save's zip format, as torch::pickle_save writes it, but with a plain pickled dict:
// pickle_save tags aggregates with their TorchScript type (torch.jit._pickle.restore_type_tag),
// which torch.load(weights_only=True), the default since torch 2.6, refuses.
Status WritePt(const std::string& path, const std::vector<ExportTensor>& tensors) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& t : tensors) dict.insert(t.name, t.value);
  std::vector<char> pickled, container;
  try {
    torch::jit::Pickler pickler(
        [&pickled](const char* bytes, size_t n) {
          pickled.insert(pickled.end(), bytes, bytes + n);
        },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
        /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(dict);
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter writer([&container](const void* bytes, size_t n) {
      const char* b = static_cast<const char*>(bytes);
      container.insert(container.end(), b, b + n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("export: serialising the state dict failed: ") +
                            e.what_without_backtrace());
  }
  return WriteFileAtomically(path, {{container.data(), container.size()}});
}

Status WriteSafetensorsFile(const std::string& path, const std::vector<ExportTensor>& tensors,
                            bool torchvision_names) {
  std::vector<SafetensorsTensor> st;
  for (const auto& t : tensors)
    st.push_back({t.name, t.value.sizes().vec(), t.value.data_ptr<float>()});
  return WriteSafetensors(path, st,
                          {{"format", "pt"},
                           {"tensor_names", torchvision_names ? "torchvision" : "mlcd"},
                           {"producer", "mlcd export"}});
}

}  // namespace

StatusOr<ExportFormat> ParseExportFormat(const std::string& name) {
  for (ExportFormat f :
       {ExportFormat::kTorchvision, ExportFormat::kSafetensors, ExportFormat::kHfVit,
        ExportFormat::kHfVitClassifier, ExportFormat::kHfClip}) {
    if (name == ExportFormatName(f)) return f;
  }
  return Status::InvalidArgument(
      "unknown export format \"" + name +
      "\": use torchvision, safetensors, hf-vit, hf-vit-classifier or hf-clip");
}

const char* ExportFormatName(ExportFormat format) {
  switch (format) {
    case ExportFormat::kTorchvision:
      return "torchvision";
    case ExportFormat::kSafetensors:
      return "safetensors";
    case ExportFormat::kHfVit:
      return "hf-vit";
    case ExportFormat::kHfVitClassifier:
      return "hf-vit-classifier";
    case ExportFormat::kHfClip:
      return "hf-clip";
  }
  return "?";
}

bool IsHuggingFaceFormat(ExportFormat format) {
  return format == ExportFormat::kHfVit || format == ExportFormat::kHfVitClassifier ||
         format == ExportFormat::kHfClip;
}

json TorchvisionArgsJson(const TorchvisionVitArgs& a) {
  return {{"image_size", a.image_size},  {"patch_size", a.patch_size}, {"num_layers", a.num_layers},
          {"num_heads", a.num_heads},    {"hidden_dim", a.hidden_dim}, {"mlp_dim", a.mlp_dim},
          {"num_classes", a.num_classes}};
}

std::string TorchvisionArgsCall(const TorchvisionVitArgs& a) {
  std::ostringstream s;
  s << "VisionTransformer(image_size=" << a.image_size << ", patch_size=" << a.patch_size
    << ", num_layers=" << a.num_layers << ", num_heads=" << a.num_heads
    << ", hidden_dim=" << a.hidden_dim << ", mlp_dim=" << a.mlp_dim
    << ", num_classes=" << a.num_classes << ")";
  return s.str();
}

Status CheckTorchvisionExpressible(const VitOptions& o, bool grey_as_rgb) {
  std::vector<std::string> differences;
  if (o.stem != VitStem::kPatch)
    differences.push_back(
        "model.stem is \"conv\" (torchvision's VisionTransformer embeds patches with one "
        "stride-p convolution; its conv_stem_configs use BatchNorm + ReLU, ours GroupNorm + GELU)");
  if (o.pooling != VitPooling::kCls)
    differences.push_back(
        "model.pooling is \"mean\" (torchvision's VisionTransformer has a class token and "
        "pools it)");
  if (o.channels != 3 && !(grey_as_rgb && o.channels == 1))
    differences.push_back(
        "model.channels is " + std::to_string(o.channels) +
        " (torchvision's VisionTransformer takes 3-channel images" +
        (o.channels == 1 ? "; --grey-as-rgb exports a 1-channel model for grey images repeated "
                           "on 3 channels"
                         : "") +
        ")");
  if (o.layout != VitLayout::kVit)
    differences.push_back(
        "model.layout is \"clip\" (torchvision's VisionTransformer has no LayerNorm after the "
        "embeddings and a patch-embedding bias; --format hf-clip writes this layout)");
  if (o.activation != VitActivation::kGelu)
    differences.push_back(
        "model.activation is \"quick_gelu\" (torchvision's VisionTransformer uses exact GELU)");
  if (std::abs(o.layer_norm_eps - kTorchvisionLayerNormEps) > 1e-12)
    differences.push_back("the LayerNorm eps is " + std::to_string(o.layer_norm_eps) +
                          " (torchvision's is 1e-6)");
  if (differences.empty()) return Status::Ok();
  std::string message = "torchvision's VisionTransformer cannot express this model: ";
  for (size_t i = 0; i < differences.size(); ++i) message += (i ? "; " : "") + differences[i];
  return Status::FailedPrecondition(
      message + ". Export it with --format safetensors (our own tensor names) instead");
}

TorchvisionVitArgs TorchvisionArgs(const VitOptions& o) {
  TorchvisionVitArgs a;
  a.image_size = o.image_size;
  a.patch_size = o.patch_size;
  a.num_layers = o.depth;
  a.num_heads = o.heads;
  a.hidden_dim = o.width;
  a.mlp_dim = o.mlp_hidden();
  a.num_classes = o.embed_dim;
  return a;
}

StatusOr<std::vector<ExportTensor>> TorchvisionStateDict(VisionTransformerImpl& model,
                                                         bool grey_as_rgb) {
  const VitOptions& o = model.options();
  MLCD_RETURN_IF_ERROR(CheckTorchvisionExpressible(o, grey_as_rgb));
  const auto params = model.named_parameters();
  const int64_t d = o.width;
  std::vector<ExportTensor> out;
  auto add = [&](const std::string& name, const std::string& ours,
                 std::vector<int64_t> shape = {}) -> Status {
    MLCD_ASSIGN_OR_RETURN(torch::Tensor t, Param(params, ours));
    out.push_back({name, shape.empty() ? t : t.view(shape)});
    return Status::Ok();
  };
  MLCD_RETURN_IF_ERROR(add("class_token", "cls_token", {1, 1, d}));
  MLCD_RETURN_IF_ERROR(add("conv_proj.weight", "patch_weight"));
  if (o.channels == 1) {
    // Each of the 3 channels gets a third: the sum over repeated grey channels is our conv.
    torch::Tensor& w = out.back().value;
    w = (w / 3.0).repeat({1, 3, 1, 1}).contiguous();
  }
  MLCD_RETURN_IF_ERROR(add("conv_proj.bias", "patch_bias"));
  MLCD_RETURN_IF_ERROR(add("encoder.pos_embedding", "pos_embed", {1, o.tokens(), d}));
  for (int i = 0; i < o.depth; ++i) {
    const std::string ours = "block" + std::to_string(i) + ".";
    const std::string theirs = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    const std::pair<const char*, const char*> pairs[] = {
        {"ln_1.weight", "norm1.weight"},
        {"ln_1.bias", "norm1.bias"},
        {"self_attention.in_proj_weight", "qkv.weight"},
        {"self_attention.in_proj_bias", "qkv.bias"},
        {"self_attention.out_proj.weight", "proj.weight"},
        {"self_attention.out_proj.bias", "proj.bias"},
        {"ln_2.weight", "norm2.weight"},
        {"ln_2.bias", "norm2.bias"},
        {"mlp.0.weight", "fc1.weight"},
        {"mlp.0.bias", "fc1.bias"},
        {"mlp.3.weight", "fc2.weight"},
        {"mlp.3.bias", "fc2.bias"},
    };
    for (const auto& [t, ourname] : pairs) MLCD_RETURN_IF_ERROR(add(theirs + t, ours + ourname));
  }
  MLCD_RETURN_IF_ERROR(add("encoder.ln.weight", "norm.weight"));
  MLCD_RETURN_IF_ERROR(add("encoder.ln.bias", "norm.bias"));
  MLCD_RETURN_IF_ERROR(add("heads.head.weight", "head"));
  out.push_back({"heads.head.bias", torch::zeros({o.embed_dim}, torch::kFloat)});
  return out;
}

std::vector<ExportTensor> NativeStateDict(VisionTransformerImpl& model) {
  std::vector<ExportTensor> out;
  for (const auto& item : model.named_parameters())
    out.push_back(
        {item.key(), item.value().detach().to(torch::kCPU, torch::kFloat).contiguous().clone()});
  return out;
}

json ExportConfig(const VitOptions& o, const ExportSettings& settings, bool torchvision_names,
                  const json& source) {
  json model = {
      {"image_size", o.image_size},
      {"patch_size", o.patch_size},
      {"channels", o.channels},
      {"width", o.width},
      {"depth", o.depth},
      {"heads", o.heads},
      {"mlp_dim", o.mlp_hidden()},
      {"embed_dim", o.embed_dim},
      {"pooling", o.pooling == VitPooling::kCls ? "cls" : "mean"},
      {"stem", o.stem == VitStem::kConv ? "conv" : "patch"},
      {"layout", o.layout == VitLayout::kClip ? "clip" : "vit"},
      {"layer_norm_eps", o.layer_norm_eps},
      {"activation", o.activation == VitActivation::kQuickGelu ? "quick_gelu (x * sigmoid(1.702 x))"
                                                               : "gelu (exact, erf)"},
      {"output", "the projected embedding, not L2-normalised"}};
  if (o.stem == VitStem::kConv) model["stem_channels"] = o.stem_channels();
  json config = {{"format", ExportFormatName(settings.format)},
                 {"tensor_names", torchvision_names ? "torchvision" : "mlcd"},
                 {"model", model},
                 {"source", source}};
  Status expressible = CheckTorchvisionExpressible(o, settings.grey_as_rgb);
  if (expressible.ok()) {
    config["torchvision"] = {{"class", "torchvision.models.VisionTransformer"},
                             {"args", TorchvisionArgsJson(TorchvisionArgs(o))}};
    if (o.channels == 1)
      config["torchvision"]["input"] =
          "3 channels, each the grey input preprocessed as for the 1-channel model";
  } else {
    config["torchvision_incompatible"] = expressible.message();
  }
  return config;
}

std::string ExportConfigPath(ExportFormat format, const std::string& out) {
  fs::path p(out);
  if (format == ExportFormat::kTorchvision) return p.replace_extension(".json").string();
  if (IsHuggingFaceFormat(format)) return (p / "config.json").string();
  return p.replace_extension(".config.json").string();
}

StatusOr<ExportResult> ExportModel(VisionTransformerImpl& model, const ExportSettings& settings,
                                   const std::string& out, const json& source) {
  const ExportFormat format = settings.format;
  if (IsHuggingFaceFormat(format)) return ExportHuggingFace(model, settings, out, source);
  const bool grey = settings.grey_as_rgb;
  if (grey && model.options().channels != 1)
    return Status::InvalidArgument("--grey-as-rgb is for 1-channel models; this one has " +
                                   std::to_string(model.options().channels) + " channels");
  if (format == ExportFormat::kTorchvision && !HasExtension(out, ".pt") &&
      !HasExtension(out, ".pth"))
    return Status::InvalidArgument("--out " + out + ": a torchvision export is a .pt or .pth file");
  if (format == ExportFormat::kSafetensors && !HasExtension(out, ".safetensors"))
    return Status::InvalidArgument("--out " + out +
                                   ": a safetensors export is a .safetensors file");
  if (IsDirectory(out))
    return Status::InvalidArgument("--out " + out + " is a directory; give a file name");
  ExportResult result;
  std::vector<ExportTensor> tensors;
  if (format == ExportFormat::kTorchvision) {
    MLCD_ASSIGN_OR_RETURN(tensors, TorchvisionStateDict(model, grey));
    result.torchvision_names = true;
  } else if (CheckTorchvisionExpressible(model.options(), grey).ok()) {
    MLCD_ASSIGN_OR_RETURN(tensors, TorchvisionStateDict(model, grey));
    result.torchvision_names = true;
  } else {
    tensors = NativeStateDict(model);
  }
  if (result.torchvision_names) result.torchvision_args = TorchvisionArgs(model.options());
  const std::string dir = fs::path(out).parent_path().string();
  if (!dir.empty()) MLCD_RETURN_IF_ERROR(MakeDirs(dir));
  result.weights_path = out;
  result.config_path = ExportConfigPath(format, out);
  for (const auto& t : tensors) {
    ++result.tensors;
    result.parameters += t.value.numel();
  }
  result.config = ExportConfig(model.options(), settings, result.torchvision_names, source);
  result.config["weights"] = fs::path(out).filename().string();
  MLCD_RETURN_IF_ERROR(format == ExportFormat::kTorchvision
                           ? WritePt(out, tensors)
                           : WriteSafetensorsFile(out, tensors, result.torchvision_names));
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(result.config_path, result.config.dump(2) + "\n"));
  return result;
}

}  // namespace mlcd::worker
