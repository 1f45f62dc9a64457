// VitOptions (worker/model/vit.h): sizes, layout and activation from a model spec, their
// validation and description, and the evaluation feature kinds' spellings.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/job_spec.h"
#include "worker/model/vit.h"  // VitOptions is declared beside the model

namespace mlcd::worker {

int VitOptions::mlp_hidden() const { return static_cast<int>(std::lround(mlp_ratio * width)); }

std::vector<int> VitOptions::stem_channels() const {
  std::vector<int> channels;
  if (stem != VitStem::kConv) return channels;
  const int layers = ConvStemLayers(image_size, patch_size);
  for (int i = 0; i < layers; ++i) channels.push_back(std::max(1, width >> (layers - 1 - i)));
  return channels;
}

Status ValidateVitOptions(const VitOptions& o) {
  auto positive = [](const char* name, double v) -> Status {
    if (v > 0) return Status::Ok();
    return Status::InvalidArgument(std::string("model.") + name + " must be positive, got " +
                                   std::to_string(v));
  };
  MLCD_RETURN_IF_ERROR(positive("image_size", o.image_size));
  MLCD_RETURN_IF_ERROR(positive("patch_size", o.patch_size));
  MLCD_RETURN_IF_ERROR(positive("channels", o.channels));
  MLCD_RETURN_IF_ERROR(positive("width", o.width));
  MLCD_RETURN_IF_ERROR(positive("depth", o.depth));
  MLCD_RETURN_IF_ERROR(positive("heads", o.heads));
  MLCD_RETURN_IF_ERROR(positive("mlp_ratio", o.mlp_ratio));
  MLCD_RETURN_IF_ERROR(positive("embed_dim", o.embed_dim));
  if (o.width % o.heads != 0) {
    return Status::InvalidArgument("model.width (" + std::to_string(o.width) +
                                   ") must be divisible by model.heads (" +
                                   std::to_string(o.heads) + ")");
  }
  if (o.image_size % o.patch_size != 0) {
    return Status::InvalidArgument("model.image_size (" + std::to_string(o.image_size) +
                                   ") must be divisible by model.patch_size (" +
                                   std::to_string(o.patch_size) + ")");
  }
  if (o.mlp_hidden() < 1)
    return Status::InvalidArgument("model.mlp_ratio * model.width must be at least 1");
  if (o.stem == VitStem::kConv && ConvStemLayers(o.image_size, o.patch_size) < 0) {
    return Status::InvalidArgument(
        "model.stem \"conv\" cannot reach " + std::to_string(o.image_size / o.patch_size) +
        " tokens per side from model.image_size " + std::to_string(o.image_size) +
        " by halving; use stem \"patch\" or another model.patch_size");
  }
  if (o.layout == VitLayout::kClip && o.pooling != VitPooling::kCls)
    return Status::InvalidArgument(
        "model.layout \"clip\" pools the class token: use model.pooling \"cls\"");
  if (o.layout == VitLayout::kClip && o.stem != VitStem::kPatch)
    return Status::InvalidArgument(
        "model.layout \"clip\" embeds patches with one convolution: use model.stem \"patch\"");
  return Status::Ok();
}

StatusOr<VitOptions> VitOptionsFromSpec(const v1::ModelSpec& spec) {
  VitOptions o;
  o.image_size = spec.image_size();
  o.patch_size = spec.patch_size();
  o.channels = spec.channels();
  o.width = spec.width();
  o.depth = spec.depth();
  o.heads = spec.heads();
  o.mlp_ratio = spec.mlp_ratio();
  o.embed_dim = spec.embed_dim();
  // An enum field's spelling (empty = the first, the default) or INVALID_ARGUMENT naming it.
  auto choose = [](const char* field, const std::string& value, auto first, auto second,
                   const char* first_name, const char* second_name, auto* out) -> Status {
    if (value.empty() || value == first_name) {
      *out = first;
    } else if (value == second_name) {
      *out = second;
    } else {
      return Status::InvalidArgument(std::string("model.") + field + " must be \"" + first_name +
                                     "\" or \"" + second_name + "\", got \"" + value + "\"");
    }
    return Status::Ok();
  };
  MLCD_RETURN_IF_ERROR(choose("pooling", spec.pooling(), VitPooling::kCls, VitPooling::kMean, "cls",
                              "mean", &o.pooling));
  MLCD_RETURN_IF_ERROR(
      choose("stem", spec.stem(), VitStem::kPatch, VitStem::kConv, "patch", "conv", &o.stem));
  MLCD_RETURN_IF_ERROR(choose("layout", spec.layout(), VitLayout::kVit, VitLayout::kClip, "vit",
                              "clip", &o.layout));
  MLCD_RETURN_IF_ERROR(choose("activation", spec.activation(), VitActivation::kGelu,
                              VitActivation::kQuickGelu, "gelu", "quick_gelu", &o.activation));
  if (o.layout == VitLayout::kClip) o.layer_norm_eps = kClipLayerNormEps;
  MLCD_RETURN_IF_ERROR(ValidateVitOptions(o));
  return o;
}

std::string DescribeVitOptions(const VitOptions& o) {
  std::ostringstream s;
  s << "width " << o.width << ", depth " << o.depth << ", heads " << o.heads << ", patch "
    << o.patch_size << ", image " << o.image_size << "x" << o.image_size << "x" << o.channels
    << ", mlp " << o.mlp_hidden() << ", embed " << o.embed_dim << ", "
    << (o.pooling == VitPooling::kCls ? "cls" : "mean") << " pooling, " << o.tokens() << " tokens";
  if (o.stem == VitStem::kConv) {
    s << ", conv stem";
    for (int c : o.stem_channels()) s << " " << c;
  }
  if (o.layout == VitLayout::kClip) s << ", CLIP layout";
  if (o.activation == VitActivation::kQuickGelu) s << ", quick GELU";
  return s.str();
}

StatusOr<VitFeatures> ParseVitFeatures(const std::string& name) {
  if (name == "embedding") return VitFeatures::kEmbedding;
  if (name == "pooled") return VitFeatures::kPooled;
  if (name == "blocks") return VitFeatures::kBlocks;
  if (name == "tokens") return VitFeatures::kTokens;
  return Status::InvalidArgument("unknown feature kind '" + name +
                                 "': use embedding, pooled, blocks or tokens");
}

const char* VitFeaturesName(VitFeatures features) {
  switch (features) {
    case VitFeatures::kEmbedding:
      return "embedding";
    case VitFeatures::kPooled:
      return "pooled";
    case VitFeatures::kBlocks:
      return "blocks";
    case VitFeatures::kTokens:
      return "tokens";
  }
  return "?";
}

}  // namespace mlcd::worker
