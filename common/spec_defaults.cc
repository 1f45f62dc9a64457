#include "common/spec_defaults.h"

#include <algorithm>

#include "common/enums.h"
#include "common/idx.h"
#include "common/limits.h"

namespace mlcd {
namespace {

// Images in the Fashion-MNIST training split.
constexpr uint64_t kFashionMnistTrainImages = 60000;

// Model input side for image-folder and webdataset datasets when neither the spec nor the
// preset gives one.
constexpr int kImageFormatSize = 224;
// training.epochs_per_round when a time budget decides the round's length: the cap.
constexpr int kBudgetedEpochsPerRound = 100;
// CLIP's normalisation (OpenAI CLIP preprocessing), the image formats' default.
constexpr double kClipMean[3] = {0.48145466, 0.4578275, 0.40821073};
constexpr double kClipStd[3] = {0.26862954, 0.26130258, 0.27577711};

void ApplyDatasetDefaults(v1::DatasetSpec* data) {
  if (data->format().empty()) data->set_format("fashion-mnist");
  if (data->path().empty() && data->format() == "fashion-mnist") data->set_path(kFashionMnistDir);
  if (!data->has_augment()) data->set_augment(true);
  if (!data->has_horizontal_flip()) data->set_horizontal_flip(true);
  if (!data->has_max_bad_fraction()) data->set_max_bad_fraction(0.001);
  if (data->format() != "fashion-mnist") {
    if (data->loader_threads() == 0) data->set_loader_threads(2);
    if (data->decode_memory_mb() == 0) data->set_decode_memory_mb(kDefaultDecodeMemoryMb);
    // torchvision's RandomResizedCrop.
    if (data->crop_min_scale() == 0) data->set_crop_min_scale(0.08);
  }
  if (data->crop_max_scale() == 0) data->set_crop_max_scale(1);
  if (data->crop_min_ratio() == 0) data->set_crop_min_ratio(3.0 / 4.0);
  if (data->crop_max_ratio() == 0) data->set_crop_max_ratio(4.0 / 3.0);
}

// CLIP's mean and std for 3 channels, their averages for 1 (grey input).
void ApplyNormalisationDefaults(int channels, v1::DatasetSpec* data) {
  if (data->mean().empty() && data->stddev().empty()) {
    for (int c = 0; c < 3 && channels == 3; ++c) {
      data->add_mean(kClipMean[c]);
      data->add_stddev(kClipStd[c]);
    }
    if (channels == 1) {
      data->add_mean((kClipMean[0] + kClipMean[1] + kClipMean[2]) / 3);
      data->add_stddev((kClipStd[0] + kClipStd[1] + kClipStd[2]) / 3);
    }
  }
}

}  // namespace

const std::vector<ModelPreset>& ModelPresets() {
  static const std::vector<ModelPreset> kPresets = {
      // CPU-sized models for 28x28 Fashion-MNIST: patch 7 gives 16 tokens.
      {"vit-tiny", 192, 6, 3, 7, 0, "vit"},
      {"vit-small", 384, 12, 6, 7, 0, "vit"},
      // Paper Table 8.
      {"vit-b32", 768, 12, 12, 32, 224, "vit"},
      {"vit-b16", 768, 12, 12, 16, 224, "vit"},
      {"vit-l14", 1024, 24, 16, 14, 224, "vit"},
      // The same sizes in the layout of CLIP's vision tower (ModelSpec.layout "clip"), the
      // one vision-language models load (docs/export.md, --format hf-clip).
      {"clip-tiny", 192, 6, 3, 7, 0, "clip"},
      {"clip-small", 384, 12, 6, 7, 0, "clip"},
      {"clip-b32", 768, 12, 12, 32, 224, "clip"},
      {"clip-b16", 768, 12, 12, 16, 224, "clip"},
      {"clip-l14", 1024, 24, 16, 14, 224, "clip"},
      {"clip-l14-336", 1024, 24, 16, 14, 336, "clip"},
  };
  return kPresets;
}

StatusOr<ModelPreset> FindModelPreset(const std::string& name) {
  std::string known;
  for (const auto& p : ModelPresets()) {
    if (name == p.name) return p;
    known += known.empty() ? p.name : std::string(", ") + p.name;
  }
  return Status::InvalidArgument("unknown model preset '" + name + "'; known presets: " + known);
}

int ConvStemLayers(int image_size, int patch_size) {
  if (image_size < 1 || patch_size < 1 || image_size % patch_size != 0) return -1;
  int layers = 0;
  while ((1 << layers) < patch_size) ++layers;
  int side = image_size;
  for (int i = 0; i < layers; ++i) side = (side + 1) / 2;
  return side == image_size / patch_size ? layers : -1;
}

const std::vector<std::string>& EvaluationFeatureKinds() {
  static const std::vector<std::string> kinds = {"embedding", "pooled", "blocks", "tokens"};
  return kinds;
}

uint64_t ClusteringRoundSeed(const v1::ClusteringSpec& clustering, int round) {
  return clustering.seed() + static_cast<uint64_t>(round);
}

namespace {

// MCL clusters each stage's own embeddings into K clusters, top-1 (docs/mcl.md).
void ApplyMclDefaults(v1::JobSpec* spec) {
  if (!spec->has_mcl()) return;
  auto* clustering = spec->mutable_clustering();
  auto* features = clustering->mutable_features();
  auto* mcl = spec->mutable_mcl();
  if (mcl->stages() == 0) mcl->set_stages(2);
  if (mcl->stage_init().empty()) mcl->set_stage_init("scratch");
  if (features->kind().empty()) features->set_kind("model");
  if (clustering->k() == 0) clustering->set_k(10);
  if (clustering->l() == 0) clustering->set_l(1);
  if (spec->training().rounds() == 0) spec->mutable_training()->set_rounds(mcl->stages());
}

// The loss section; the contrastive head's hidden width defaults to the embedding's.
void ApplyLossDefaults(int embed_dim, v1::LossSpec* loss) {
  if (loss->variant().empty()) loss->set_variant(LossVariantName(LossVariant::kMlcd));
  if (loss->sample_ratio() == 0) loss->set_sample_ratio(0.1);
  if (loss->scale() == 0) loss->set_scale(32);
  if (!loss->has_margin()) loss->set_margin(0.3);
  if (loss->margin_type().empty()) loss->set_margin_type(MarginTypeName(MarginType::kArc));
  if (loss->variant() == LabelHeadVariantName(LabelHeadVariant::kMulCon)) {
    auto* mulcon = loss->mutable_mulcon();
    if (mulcon->label_dim() == 0) mulcon->set_label_dim(256);
    if (mulcon->heads() == 0) mulcon->set_heads(4);
    if (mulcon->projection_dim() == 0) mulcon->set_projection_dim(128);
    if (!mulcon->has_pretrain_fraction()) mulcon->set_pretrain_fraction(0.5);
    if (mulcon->contrastive_lr_multiplier() == 0) mulcon->set_contrastive_lr_multiplier(0.1);
    if (mulcon->llcl_weight() == 0) mulcon->set_llcl_weight(0.1);
    if (mulcon->temperature() == 0) mulcon->set_temperature(0.2);
  }
  // The contrastive variants' temperature and projection head (the head's hidden width is the
  // embedding's); classification specs keep these fields unset.
  auto family = LossFamilyOf(loss->variant());
  if (family.ok() && *family == LossFamily::kContrastive) {
    if (loss->temperature() == 0) loss->set_temperature(0.1);
    if (!loss->has_projection_dim()) loss->set_projection_dim(128);
    if (loss->projection_dim() > 0 && loss->projection_hidden_dim() == 0)
      loss->set_projection_hidden_dim(embed_dim);
  }
}

}  // namespace

void ApplyJobSpecDefaults(v1::JobSpec* spec) {
  auto* data = spec->mutable_dataset();
  if (data->format().empty()) data->set_format("fashion-mnist");
  ApplyDatasetDefaults(data);

  auto* clustering = spec->mutable_clustering();
  auto* features = clustering->mutable_features();
  ApplyMclDefaults(spec);
  if (features->kind().empty()) features->set_kind("pixels");
  if (features->kind() == "random-projection" && features->dim() == 0) features->set_dim(256);
  // A given label set brings its own k and l: left 0, the coordinator fills them from it.
  if (clustering->label_set().empty()) {
    if (clustering->k() == 0) clustering->set_k(1000);
    if (clustering->l() == 0) clustering->set_l(8);
  }
  if (clustering->niter() == 0) clustering->set_niter(20);
  if (clustering->max_points_per_centroid() == 0) clustering->set_max_points_per_centroid(256);
  if (clustering->seed() == 0) clustering->set_seed(kDefaultClusteringSeed);
  if (clustering->search().empty()) clustering->set_search(SearchMethodName(SearchMethod::kExact));
  if (clustering->engine().empty())
    clustering->set_engine(ClusteringEngineName(ClusteringEngine::kClusterd));

  auto* model = spec->mutable_model();
  if (model->preset().empty()) model->set_preset("vit-tiny");
  auto preset = FindModelPreset(model->preset());
  if (preset.ok()) {
    if (model->width() == 0) model->set_width(preset->width);
    if (model->depth() == 0) model->set_depth(preset->depth);
    if (model->heads() == 0) model->set_heads(preset->heads);
    if (model->patch_size() == 0) model->set_patch_size(preset->patch_size);
    if (model->image_size() == 0 && preset->image_size) model->set_image_size(preset->image_size);
    if (model->layout().empty()) model->set_layout(preset->layout);
  }
  if (data->format() == "fashion-mnist") {
    if (model->image_size() == 0) model->set_image_size(28);
    if (model->channels() == 0) model->set_channels(1);
  } else {
    if (model->image_size() == 0) model->set_image_size(kImageFormatSize);
    if (model->channels() == 0) model->set_channels(3);
    ApplyNormalisationDefaults(model->channels(), data);
  }
  if (model->mlp_ratio() == 0) model->set_mlp_ratio(4);
  if (model->embed_dim() == 0) model->set_embed_dim(512);
  if (model->pooling().empty()) model->set_pooling("cls");
  if (model->stem().empty()) model->set_stem("patch");
  if (model->layout().empty()) model->set_layout("vit");
  if (model->activation().empty()) model->set_activation("gelu");
  ApplyLossDefaults(model->embed_dim(), spec->mutable_loss());

  auto* opt = spec->mutable_optimizer();
  if (opt->name().empty()) opt->set_name("adamw");
  if (opt->lr() == 0) opt->set_lr(1e-3);
  if (!opt->has_weight_decay()) opt->set_weight_decay(0.2);
  if (opt->beta1() == 0) opt->set_beta1(0.9);
  if (opt->beta2() == 0) opt->set_beta2(0.98);
  if (!opt->has_warmup_fraction()) opt->set_warmup_fraction(0.05);
  if (opt->schedule().empty()) opt->set_schedule("cosine");
  if (opt->centre_lr_multiplier() == 0) opt->set_centre_lr_multiplier(1);
  if (opt->grad_clip_norm() == 0) opt->set_grad_clip_norm(5);

  auto* training = spec->mutable_training();
  // With a time budget epochs_per_round only caps the round (the budget decides).
  if (training->epochs_per_round() == 0)
    training->set_epochs_per_round(training->time_budget_minutes() > 0 ? kBudgetedEpochsPerRound
                                                                       : 1);
  if (training->batch_size() == 0) training->set_batch_size(256);
  if (training->world_size() == 0) training->set_world_size(1);
  if (!training->has_max_restarts()) training->set_max_restarts(3);
  if (training->heartbeat_timeout_seconds() == 0) training->set_heartbeat_timeout_seconds(30);
  if (training->collective_timeout_seconds() == 0) training->set_collective_timeout_seconds(120);
  if (training->label_prefetch_depth() == 0) training->set_label_prefetch_depth(4);
  if (training->rounds() == 0) training->set_rounds(1);
  if (training->centre_init().empty()) training->set_centre_init("auto");
  if (training->precision().empty()) training->set_precision(PrecisionName(Precision::kFp32));
  if (training->tensorboard_every_steps() == 0)
    training->set_tensorboard_every_steps(kDefaultTensorboardEverySteps);

  auto* eval = spec->mutable_evaluation();
  if (!eval->has_enabled()) eval->set_enabled(true);
  if (!eval->has_linear_probe()) eval->set_linear_probe(true);
  if (!eval->has_knn()) eval->set_knn(true);
  if (!eval->has_baselines()) eval->set_baselines(true);
  if (!eval->has_multi_label()) eval->set_multi_label(true);
  if (!eval->has_attributes()) eval->set_attributes(true);
  if (eval->knn_k() == 0) eval->set_knn_k(20);
  if (eval->knn_temperature() == 0) eval->set_knn_temperature(0.07);
  if (eval->features().empty()) eval->set_features("embedding");
  if (eval->feature_blocks() == 0)
    eval->set_feature_blocks(std::min(4, model->depth() > 0 ? model->depth() : 4));
  if (!eval->has_dataset()) *eval->mutable_dataset() = *data;
  ApplyDatasetDefaults(eval->mutable_dataset());
  if (eval->dataset().format() != "fashion-mnist")
    ApplyNormalisationDefaults(model->channels(), eval->mutable_dataset());
}

bool IsIndexedFormat(const std::string& format) {
  return format == "image-folder" || format == "webdataset";
}

uint64_t DatasetTrainingImages(const v1::DatasetSpec& dataset) {
  uint64_t split = 0;
  if (dataset.format() == "fashion-mnist" || dataset.format().empty())
    split = kFashionMnistTrainImages;
  if (dataset.limit() == 0) return split;
  return split ? std::min<uint64_t>(split, dataset.limit()) : dataset.limit();
}

}  // namespace mlcd
