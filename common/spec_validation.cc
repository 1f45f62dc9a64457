#include "common/spec_validation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "common/enums.h"
#include "common/idx.h"
#include "common/limits.h"
#include "common/mulcon_memory.h"
#include "common/spec_defaults.h"

namespace mlcd {
namespace {

// Collects the problems of one section of a spec; fields are named relative to `prefix`.
class Checker {
 public:
  Checker(std::vector<SpecProblem>* problems, std::string prefix)
      : problems_(problems), prefix_(std::move(prefix)) {}
  void Add(const std::string& field, const std::string& message) {
    problems_->push_back({prefix_.empty() ? field : prefix_ + "." + field, message});
  }
  template <typename T>
  void AtLeast(const std::string& field, T value, T min) {
    if (value < min) Add(field, Num(value) + " must be >= " + Num(min));
  }
  template <typename T>
  void AtMost(const std::string& field, T value, T max) {
    if (value > max) Add(field, Num(value) + " must be <= " + Num(max));
  }
  // min <= value <= max, with the bound in the message.
  template <typename T>
  void InRange(const std::string& field, T value, T min, T max) {
    if (!(value >= min && value <= max))
      Add(field, Num(value) + " is not in [" + Num(min) + ", " + Num(max) + "]");
  }
  // A path: at most kMaxPathLength bytes, no NUL (which would silently cut it).
  void Path(const std::string& field, const std::string& path) {
    if (path.size() > kMaxPathLength) Add(field, "longer than " + Num(kMaxPathLength) + " bytes");
    if (path.find('\0') != std::string::npos)
      Add(field, "holds a NUL byte; a path cannot contain one");
  }
  // Free text (names, kinds): at most kMaxSpecStringLength bytes, no NUL.
  void Text(const std::string& field, const std::string& text) {
    if (text.size() > kMaxSpecStringLength)
      Add(field, "longer than " + Num(kMaxSpecStringLength) + " bytes");
    else if (text.find('\0') != std::string::npos)
      Add(field, "holds a NUL byte");
  }
  // A repeated field: at most `max` entries.
  void ListSize(const std::string& field, int size, int max) {
    if (size > max) Add(field, Num(size) + " entries; at most " + Num(max));
  }
  template <typename T>
  void Positive(const std::string& field, T value) {
    if (!(value > 0)) Add(field, Num(value) + " must be > 0");
  }
  void OneOf(const std::string& field, const std::string& value,
             const std::vector<std::string>& allowed) {
    if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
    std::string list;
    for (size_t i = 0; i < allowed.size(); ++i) list += (i ? ", " : "") + allowed[i];
    Add(field, "'" + value + "' is not one of: " + list);
  }
  template <typename T>
  static std::string Num(T v) {
    std::ostringstream out;
    out << v;
    return out.str();
  }

 private:
  std::vector<SpecProblem>* problems_;
  std::string prefix_;
};

// What the section checks share.
struct SectionContext {
  const v1::JobSpec& spec;
  std::string prefix;       // "spec." (or "" without a path prefix)
  uint64_t images;          // DatasetTrainingImages(spec.dataset()); 0 = unknown
  std::string images_text;  // "500 training images (spec.dataset.limit)" for messages
};

// decode_memory_mb in [0 (default), kMaxDecodeMemoryMb], and room in it for every loader
// thread to hold one image of kDecodeMemoryPerLoaderThreadMb.
void CheckDecodeMemory(Checker& c, const v1::DatasetSpec& d) {
  c.InRange("decode_memory_mb", d.decode_memory_mb(), 0, kMaxDecodeMemoryMb);
  const int64_t budget = d.decode_memory_mb() > 0 ? d.decode_memory_mb() : kDefaultDecodeMemoryMb;
  const int64_t needed = int64_t{d.loader_threads()} * kDecodeMemoryPerLoaderThreadMb;
  if (d.decode_memory_mb() >= 0 && needed > budget) {
    c.Add("loader_threads",
          Checker::Num(d.loader_threads()) + " threads need at least " +
              Checker::Num(d.loader_threads()) + " x " +
              Checker::Num(kDecodeMemoryPerLoaderThreadMb) + " MiB = " + Checker::Num(needed) +
              " MiB of decode memory, more than " + "decode_memory_mb " + Checker::Num(budget) +
              "; use at most " + Checker::Num(budget / kDecodeMemoryPerLoaderThreadMb) +
              " threads or raise decode_memory_mb");
  }
}

// A dataset (the job's or evaluation's, under `c`): a known format, where its files are,
// the normalisation, the loader and bad-sample settings.
void CheckDatasetSpec(Checker& c, const v1::DatasetSpec& d, const v1::ModelSpec& model,
                      bool needs_test_split) {
  const int channels = model.channels();
  c.OneOf("format", d.format(), DatasetFormatNames());
  c.Path("path", d.path());
  c.Path("index", d.index());
  c.Path("test_index", d.test_index());
  c.ListSize("paths", d.paths_size(), kMaxSpecListLength);
  for (int i = 0; i < d.paths_size() && i < kMaxSpecListLength; ++i)
    c.Path("paths[" + std::to_string(i) + "]", d.paths(i));
  c.ListSize("mean", d.mean_size(), kMaxChannels);
  c.ListSize("stddev", d.stddev_size(), kMaxChannels);
  c.AtMost("resize_size", d.resize_size(), kMaxImageSize);
  if (!IsIndexedFormat(d.format())) {
    if (d.path().empty()) c.Add("path", "empty; give the directory of the dataset's files");
    if (!d.paths().empty() || !d.index().empty() || !d.test_index().empty())
      c.Add("index", "paths, index and test_index are for image-folder and webdataset datasets");
  } else {
    if (d.index().empty() && d.path().empty() && d.paths().empty()) {
      c.Add("index", "empty; " + d.format() +
                         " datasets are read through an index: give dataset.path (the "
                         "coordinator indexes it) or run `mlcdctl dataset index --format " +
                         d.format() + " --path ... --out DIR` and give DIR here");
    }
    if (d.format() == "image-folder" && d.paths_size() > 0)
      c.Add("paths", "an image folder is one root: give it as path");
    if (needs_test_split && d.test_index().empty()) {
      c.Add("test_index",
            "empty; evaluation needs the index of a test split (or set evaluation.enabled: "
            "false)");
    }
    if (d.limit() > 0) c.Add("limit", "only fashion-mnist takes a limit; index fewer images");
  }
  if (d.mean_size() != d.stddev_size() ||
      (d.mean_size() > 0 && channels > 0 && d.mean_size() != channels)) {
    c.Add("mean", "mean and stddev need one value per model channel (" + Checker::Num(channels) +
                      "); got " + Checker::Num(d.mean_size()) + " and " +
                      Checker::Num(d.stddev_size()));
  }
  for (double v : d.stddev()) {
    if (!(v > 0)) c.Add("stddev", Checker::Num(v) + " must be > 0");
  }
  if (!(d.max_bad_fraction() >= 0 && d.max_bad_fraction() <= 1))
    c.Add("max_bad_fraction", Checker::Num(d.max_bad_fraction()) + " is outside [0, 1]");
  if (d.resize_size() != 0 && d.resize_size() < model.image_size())
    c.Add("resize_size", Checker::Num(d.resize_size()) + " < model.image_size " +
                             Checker::Num(model.image_size()) +
                             "; the centre crop needs at least image_size pixels (0 = default)");
  if (d.loader_threads() < 0 || d.loader_threads() > kMaxLoaderThreads)
    c.Add("loader_threads", Checker::Num(d.loader_threads()) + " is outside [0, " +
                                Checker::Num(kMaxLoaderThreads) + "]");
  CheckDecodeMemory(c, d);
}

// The training augmentation of a dataset (evaluation uses none).
void CheckAugmentation(Checker& c, const v1::DatasetSpec& d) {
  const double lo = d.crop_min_scale(), hi = d.crop_max_scale();
  if (!(lo >= 0 && lo <= 1)) {
    c.Add("crop_min_scale", Checker::Num(lo) +
                                " is outside [0, 1]; 0 = pad-and-crop, e.g. 0.5 = random resized "
                                "crops of 50% to 100% of the image area");
  }
  if ((lo >= 0 && lo <= 1) && !(hi > 0 && hi <= 1 && hi >= lo))
    c.Add("crop_max_scale", Checker::Num(hi) + " must be in [crop_min_scale, 1]");
  for (const auto& [field, p] :
       {std::pair<const char*, double>{"color_jitter_prob", d.color_jitter_prob()},
        {"grayscale_prob", d.grayscale_prob()}}) {
    if (!(p >= 0 && p <= 1)) c.Add(field, Checker::Num(p) + " is not a probability in [0, 1]");
  }
  for (const auto& [field, x] :
       {std::pair<const char*, double>{"jitter_brightness", d.jitter_brightness()},
        {"jitter_contrast", d.jitter_contrast()},
        {"jitter_saturation", d.jitter_saturation()}}) {
    if (!(x >= 0 && x <= kMaxJitterStrength)) {
      c.Add(field, Checker::Num(x) + " is not in [0, " + Checker::Num(kMaxJitterStrength) +
                       "]: factors are drawn from [max(0, 1 - x), 1 + x] (SimCLR 0.8)");
    }
  }
  if (!(d.jitter_hue() >= 0 && d.jitter_hue() <= 0.5)) {
    c.Add("jitter_hue", Checker::Num(d.jitter_hue()) +
                            " is not in [0, 0.5]: the hue shift is a fraction of the colour "
                            "wheel (SimCLR 0.2)");
  }
  if (!(d.crop_min_ratio() > 0 && d.crop_max_ratio() >= d.crop_min_ratio()))
    c.Add("crop_min_ratio",
          "the aspect ratio range must satisfy 0 < crop_min_ratio <= "
          "crop_max_ratio (width / height, e.g. 0.75 to 1.333)");
}

// dataset: see CheckDatasetSpec and CheckAugmentation.
void CheckDataset(const SectionContext& s, std::vector<SpecProblem>* problems) {
  Checker c(problems, s.prefix + "dataset");
  CheckAugmentation(c, s.spec.dataset());
  CheckDatasetSpec(c, s.spec.dataset(), s.spec.model(), /*needs_test_split=*/false);
}

// clustering: the feature source, k and l (l <= k, l <= kMaxLabelsPerSample, k <= images),
// the k-means settings and the search method.
void CheckClustering(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& cl = s.spec.clustering();
  Checker c(problems, s.prefix + "clustering");
  const auto& f = cl.features();
  c.OneOf("features.kind", f.kind(), {"pixels", "random-projection", "npy", "model"});
  if (f.kind() == "npy" && f.paths().empty()) {
    c.Add("features.paths",
          "empty; kind 'npy' needs at least one .npy file or directory of shards");
  }
  if (f.kind() != "npy" && !f.paths().empty()) {
    c.Add("features.paths", "only read when features.kind is 'npy' (it is '" + f.kind() + "')");
  }
  c.ListSize("features.paths", f.paths_size(), kMaxSpecListLength);
  for (int i = 0; i < f.paths_size() && i < kMaxSpecListLength; ++i) {
    if (f.paths(i).empty()) c.Add("features.paths[" + std::to_string(i) + "]", "empty path");
    c.Path("features.paths[" + std::to_string(i) + "]", f.paths(i));
  }
  c.Path("features.keys", f.keys());
  if (f.kind() == "random-projection") c.InRange("features.dim", f.dim(), 1, kMaxProjectionDim);
  const bool indexed = IsIndexedFormat(s.spec.dataset().format());
  // A given label set replaces clustering: its features are never made.
  const bool given = !cl.label_set().empty();
  if (given) c.Text("label_set", cl.label_set());
  if (!given && indexed && (f.kind() == "pixels" || f.kind() == "random-projection")) {
    c.Add("features.kind", "'" + f.kind() + "' features are made from fashion-mnist only; for " +
                               s.spec.dataset().format() +
                               " use 'npy' (e.g. CLIP embeddings) or 'model'");
  }
  if (!f.keys().empty() && (f.kind() != "npy" || !indexed)) {
    c.Add("features.keys",
          "a keys file aligns 'npy' features with an image-folder or "
          "webdataset index; remove it or change the kind or dataset");
  }
  // With a given set, k and l 0 mean "the set's" (filled in at submit).
  if (!given || cl.k() != 0) c.InRange("k", cl.k(), 1, kMaxClusters);
  if (!given || cl.l() != 0) c.AtLeast("l", cl.l(), 1);
  if (cl.l() > kMaxLabelsPerSample) {
    c.Add("l", Checker::Num(cl.l()) + " > " + Checker::Num(kMaxLabelsPerSample) +
                   ", the most labels per sample the label store keeps");
  }
  if (cl.k() >= 1 && cl.l() > cl.k())
    c.Add("l", Checker::Num(cl.l()) + " > k: " + Checker::Num(cl.k()));
  if (!given && s.images > 0 && cl.k() > 0 && static_cast<uint64_t>(cl.k()) > s.images) {
    c.Add("k",
          Checker::Num(cl.k()) + " > the " + s.images_text + "; k-means needs at least k points");
  }
  c.InRange("niter", cl.niter(), 1, kMaxKMeansIterations);
  c.InRange("max_points_per_centroid", cl.max_points_per_centroid(), 1, kMaxPointsPerCentroid);
  c.AtMost("seed", cl.seed(), kMaxClusteringSeed);
  c.OneOf("search", cl.search(), SearchMethodNames());
  c.OneOf("engine", cl.engine(), ClusteringEngineNames());
  if (cl.engine() == ClusteringEngineName(ClusteringEngine::kGang)) {
    // Every feature kind is the gang's: it reads shards of rows or computes round-0 features.
    if (cl.search() != SearchMethodName(SearchMethod::kExact)) {
      c.Add("search",
            "'" + cl.search() +
                "' is an approximate search of mlcd-clusterd; engine "
                "'gang' searches exactly (GEMM + top-l on every rank): use search 'exact' "
                "or engine 'clusterd'");
    }
  }
}

// loss: the variant, sample ratio, scale and margin.
void CheckLoss(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& loss = s.spec.loss();
  Checker c(problems, s.prefix + "loss");
  const auto family = LossFamilyOf(loss.variant());
  if (!family.ok()) {
    std::vector<std::string> names = LossVariantNames();
    for (const std::string& n : ContrastiveVariantNames()) names.push_back(n);
    for (const std::string& n : LabelHeadVariantNames()) names.push_back(n);
    c.OneOf("variant", loss.variant(), names);
  }
  if (family.ok() && *family == LossFamily::kContrastive) {
    if (!(loss.temperature() > 0 && std::isfinite(loss.temperature()))) {
      c.Add("temperature", Checker::Num(loss.temperature()) +
                               " must be finite and > 0 (SupCon and MulSupCon use 0.1, SimCLR "
                               "0.1 to 0.5)");
    }
    c.InRange("projection_dim", loss.projection_dim(), 0, kMaxProjectionHeadDim);
    if (loss.projection_dim() > 0)
      c.InRange("projection_hidden_dim", loss.projection_hidden_dim(), 1, kMaxProjectionHeadDim);
    if (loss.queue_size() != 0) {
      c.Add("queue_size", Checker::Num(loss.queue_size()) +
                              ": a MoCo-style queue with a momentum key encoder is not built; "
                              "set 0 (the gathered global batch's in-batch negatives; "
                              "docs/loss.md says why)");
    }
  }
  if (!(loss.sample_ratio() > 0 && loss.sample_ratio() <= 1)) {
    c.Add("sample_ratio", Checker::Num(loss.sample_ratio()) + " is not in (0, 1]");
  }
  if (!(loss.scale() > 0 && loss.scale() <= kMaxLossScale)) {
    c.Add("scale",
          Checker::Num(loss.scale()) + " is not in (0, " + Checker::Num(kMaxLossScale) + "]");
  }
  if (!(loss.margin() >= 0 && loss.margin() <= 1))
    c.Add("margin", Checker::Num(loss.margin()) + " is not in [0, 1]");
  c.OneOf("margin_type", loss.margin_type(), MarginTypeNames());
}

// loss.mulcon (variant "mulcon" only): the head's sizes, heads dividing the backbone's width
// and label_dim, the schedule, and the head's activation memory on one worker's batch
// (common/mulcon_memory.h) against kMaxActivationBytes, with the numbers.
void CheckMulcon(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& loss = s.spec.loss();
  if (loss.variant() != LabelHeadVariantName(LabelHeadVariant::kMulCon)) return;
  const auto& mc = loss.mulcon();
  const auto& m = s.spec.model();
  Checker c(problems, s.prefix + "loss.mulcon");
  c.InRange("label_dim", mc.label_dim(), 1, kMaxMulconDim);
  c.InRange("projection_dim", mc.projection_dim(), 1, kMaxMulconDim);
  c.InRange("heads", mc.heads(), 1, kMaxModelHeads);
  if (mc.heads() >= 1 && mc.label_dim() >= 1 &&
      (mc.label_dim() % mc.heads() != 0 || (m.width() >= 1 && m.width() % mc.heads() != 0))) {
    c.Add("heads", Checker::Num(mc.heads()) + " must divide label_dim (" +
                       Checker::Num(mc.label_dim()) + ") and model.width (" +
                       Checker::Num(m.width()) + ")");
  }
  if (!(mc.pretrain_fraction() >= 0 && mc.pretrain_fraction() < 1))
    c.Add("pretrain_fraction", Checker::Num(mc.pretrain_fraction()) + " is not in [0, 1)");
  if (!(mc.contrastive_lr_multiplier() > 0 && mc.contrastive_lr_multiplier() <= 1)) {
    c.Add("contrastive_lr_multiplier",
          Checker::Num(mc.contrastive_lr_multiplier()) + " is not in (0, 1]");
  }
  c.Positive("llcl_weight", mc.llcl_weight());
  c.Positive("temperature", mc.temperature());
  const auto& t = s.spec.training();
  const int64_t k = s.spec.clustering().k();  // 0 until a given label set's k is known
  if (k < 1 || t.world_size() < 1 || m.patch_size() < 1 || m.image_size() < m.patch_size() ||
      mc.label_dim() < 1 || mc.heads() < 1)
    return;
  const int64_t side = m.image_size() / m.patch_size();
  MulconHeadShape shape;
  shape.images = (int64_t{t.batch_size()} + t.world_size() - 1) / t.world_size();
  shape.patches = side * side;
  shape.token_dim = m.width();
  shape.labels = k;
  shape.label_dim = mc.label_dim();
  shape.heads = mc.heads();
  shape.projection_dim = mc.projection_dim();
  const double bytes = MulconHeadActivationBytes(shape);
  if (bytes > kMaxActivationBytes) {
    c.Add("label_dim",
          "the label-level embeddings of one worker's batch would take about " +
              Checker::Num(bytes / 1e9) + " GB (" + Checker::Num(shape.images) +
              " images per worker x L = " + Checker::Num(k) + " labels x D = " +
              Checker::Num(mc.label_dim()) + ", with the attention over " +
              Checker::Num(shape.patches) + " patch tokens; common/mulcon_memory.h); at most " +
              Checker::Num(kMaxActivationBytes / 1e9) +
              " GB: use a smaller label_dim or batch_size, or more workers (world_size)");
  }
}

// The images of a format with fixed channels (Fashion-MNIST: 1) must match model.channels;
// the image formats decode to the model's channels. `where` names the dataset field.
void CheckDatasetChannels(Checker& c, const v1::ModelSpec& m, const v1::DatasetSpec& d,
                          const std::string& where) {
  if (d.format() != "fashion-mnist" || m.channels() < 1 || m.channels() == kFashionMnistChannels)
    return;
  c.Add("channels", Checker::Num(m.channels()) + " but fashion-mnist (" + where + ") has " +
                        Checker::Num(kFashionMnistChannels) +
                        " channel (grey images); set model.channels: 1 or leave it out");
}

// model: a known preset, a ViT shape that divides (width by heads, image by patch), pooling,
// a stem that reaches the patch grid, a layout and activation (the CLIP layout with class-token
// pooling and the patch stem only).
void CheckModel(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& m = s.spec.model();
  Checker c(problems, s.prefix + "model");
  auto preset = FindModelPreset(m.preset());
  if (!preset.ok()) c.Add("preset", preset.status().message());
  c.Text("preset", m.preset());
  c.InRange("width", m.width(), 1, kMaxModelWidth);
  c.InRange("depth", m.depth(), 1, kMaxModelDepth);
  c.InRange("heads", m.heads(), 1, kMaxModelHeads);
  if (m.width() >= 1 && m.heads() >= 1 && m.width() % m.heads() != 0) {
    c.Add("width",
          Checker::Num(m.width()) + " is not divisible by heads: " + Checker::Num(m.heads()));
  }
  c.InRange("patch_size", m.patch_size(), 1, kMaxImageSize);
  c.InRange("image_size", m.image_size(), 1, kMaxImageSize);
  if (m.patch_size() >= 1 && m.image_size() >= 1 && m.image_size() % m.patch_size() != 0) {
    c.Add("image_size", Checker::Num(m.image_size()) +
                            " is not divisible by patch_size: " + Checker::Num(m.patch_size()));
  }
  c.InRange("channels", m.channels(), 1, kMaxChannels);
  CheckDatasetChannels(c, m, s.spec.dataset(), s.prefix + "dataset");
  if (s.spec.evaluation().enabled() &&
      s.spec.evaluation().dataset().format() != s.spec.dataset().format())
    CheckDatasetChannels(c, m, s.spec.evaluation().dataset(), s.prefix + "evaluation.dataset");
  if (!(m.mlp_ratio() > 0 && m.mlp_ratio() <= kMaxMlpRatio))
    c.Add("mlp_ratio",
          Checker::Num(m.mlp_ratio()) + " is not in (0, " + Checker::Num(kMaxMlpRatio) + "]");
  c.InRange("embed_dim", m.embed_dim(), 1, kMaxEmbedDim);
  const double params = (4 + 2 * m.mlp_ratio()) * static_cast<double>(m.width()) * m.width() *
                        static_cast<double>(m.depth());
  if (m.mlp_ratio() > 0 && m.mlp_ratio() <= kMaxMlpRatio && params > kMaxModelParameters) {
    c.Add("width", "the backbone would have about " + Checker::Num(params) +
                       " parameters ((4 + 2 * mlp_ratio) * width^2 * depth); at most " +
                       Checker::Num(kMaxModelParameters));
  }
  c.OneOf("pooling", m.pooling(), {"cls", "mean"});
  c.OneOf("stem", m.stem(), {"patch", "conv"});
  c.OneOf("layout", m.layout(), {"vit", "clip"});
  c.OneOf("activation", m.activation(), {"gelu", "quick_gelu"});
  if (m.layout() == "clip" && m.pooling() == "mean")
    c.Add("pooling",
          "\"mean\" with layout \"clip\": CLIP's vision tower pools its class token; "
          "use pooling \"cls\" or layout \"vit\"");
  if (m.layout() == "clip" && m.stem() == "conv")
    c.Add("stem",
          "\"conv\" with layout \"clip\": CLIP's vision tower embeds patches with one "
          "convolution; use stem \"patch\" or layout \"vit\"");
  if (m.stem() == "conv" && m.patch_size() >= 1 && m.image_size() >= 1 &&
      m.image_size() % m.patch_size() == 0 && ConvStemLayers(m.image_size(), m.patch_size()) < 0) {
    c.Add("stem", "\"conv\" halves the image side with each layer and cannot reach " +
                      Checker::Num(m.image_size() / m.patch_size()) +
                      " tokens per side from image_size " + Checker::Num(m.image_size()) +
                      " (patch_size " + Checker::Num(m.patch_size()) +
                      "); use stem \"patch\" or a patch_size whose ceil(log2) halvings give "
                      "image_size / patch_size");
  }
}

// model x training: the sequence length (patch tokens) and the estimated activation memory of
// one worker's share of a batch, each bounded, with the numbers in the message.
void CheckActivations(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& m = s.spec.model();
  const auto& t = s.spec.training();
  if (m.patch_size() < 1 || m.image_size() < 1 || m.patch_size() > m.image_size() ||
      m.width() < 1 || m.depth() < 1 || m.heads() < 1 || !(m.mlp_ratio() > 0) ||
      m.mlp_ratio() > kMaxMlpRatio)
    return;  // CheckModel names those
  const int64_t side = m.image_size() / m.patch_size();
  const int64_t tokens = side * side;
  if (tokens > kMaxSequenceLength) {
    Checker(problems, s.prefix + "model")
        .Add("image_size", "image_size " + Checker::Num(m.image_size()) + " / patch_size " +
                               Checker::Num(m.patch_size()) + " gives " + Checker::Num(side) +
                               "^2 = " + Checker::Num(tokens) + " tokens per image; at most " +
                               Checker::Num(kMaxSequenceLength) +
                               " (use a larger patch_size or a smaller image_size)");
    return;
  }
  // The largest worker's share (ceil): the batch is split as evenly as it goes.
  const int64_t local_batch =
      t.world_size() >= 1 ? (int64_t{t.batch_size()} + t.world_size() - 1) / t.world_size() : 0;
  const double length = static_cast<double>(tokens + 1);
  const double per_block =
      (8 + 2 * m.mlp_ratio()) * length * m.width() + 2.0 * m.heads() * length * length;
  const double bytes = static_cast<double>(local_batch) * m.depth() * per_block * 4;
  if (local_batch > 0 && bytes > kMaxActivationBytes) {
    Checker(problems, s.prefix + "training")
        .Add("batch_size",
             "the activations of one worker's batch would take about " + Checker::Num(bytes / 1e9) +
                 " GB (" + Checker::Num(local_batch) + " images per worker x depth " +
                 Checker::Num(m.depth()) + " x ((8 + 2 * " +
                 "mlp_ratio) * L * width + 2 * heads * L^2) x 4 bytes, L = " +
                 Checker::Num(tokens + 1) + " tokens); at most " +
                 Checker::Num(kMaxActivationBytes / 1e9) +
                 " GB: use a smaller batch_size, more workers (world_size) or a smaller model");
  }
}

// optimizer: name, learning rates, betas, warmup and schedule.
void CheckOptimizer(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& o = s.spec.optimizer();
  Checker c(problems, s.prefix + "optimizer");
  c.OneOf("name", o.name(), {"adamw", "sgd"});
  c.Positive("lr", o.lr());
  if (o.weight_decay() < 0) c.Add("weight_decay", Checker::Num(o.weight_decay()) + " must be >= 0");
  if (!(o.beta1() >= 0 && o.beta1() < 1))
    c.Add("beta1", Checker::Num(o.beta1()) + " is not in [0, 1)");
  if (!(o.beta2() >= 0 && o.beta2() < 1))
    c.Add("beta2", Checker::Num(o.beta2()) + " is not in [0, 1)");
  if (!(o.warmup_fraction() >= 0 && o.warmup_fraction() < 1)) {
    c.Add("warmup_fraction", Checker::Num(o.warmup_fraction()) + " is not in [0, 1)");
  }
  c.OneOf("schedule", o.schedule(), {"cosine", "constant"});
  c.Positive("centre_lr_multiplier", o.centre_lr_multiplier());
}

// training: batch and gang sizes and their relations, timeouts, rounds, centre init.
void CheckTraining(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& t = s.spec.training();
  Checker c(problems, s.prefix + "training");
  c.InRange("epochs_per_round", t.epochs_per_round(), 1, kMaxEpochsPerRound);
  c.InRange("batch_size", t.batch_size(), 1, kMaxBatchSize);
  c.Path("checkpoint_dir", t.checkpoint_dir());
  c.AtLeast("world_size", t.world_size(), 1);
  if (t.world_size() > kMaxWorldSize)
    c.Add("world_size", Checker::Num(t.world_size()) + " > " + Checker::Num(kMaxWorldSize));
  if (t.batch_size() >= 1 && t.world_size() >= 1 && t.batch_size() % t.world_size() != 0) {
    c.Add("batch_size", Checker::Num(t.batch_size()) +
                            " is not divisible by world_size: " + Checker::Num(t.world_size()));
  }
  if (s.images > 0 && t.batch_size() > 0 && static_cast<uint64_t>(t.batch_size()) > s.images) {
    c.Add("batch_size", Checker::Num(t.batch_size()) + " > the " + s.images_text +
                            "; an epoch drops its last partial batch, so it would have no step");
  }
  const auto family = LossFamilyOf(s.spec.loss().variant());
  const bool contrastive = family.ok() && *family == LossFamily::kContrastive;
  if (contrastive && t.batch_size() == 1) {
    c.Add("batch_size",
          "1: a contrastive loss.variant needs at least 2 images per global batch "
          "(one image's two views have no negative to contrast with)");
  }
  if (!contrastive && s.spec.clustering().k() > 0 && t.world_size() > s.spec.clustering().k()) {
    c.Add("world_size", Checker::Num(t.world_size()) +
                            " > clustering.k: " + Checker::Num(s.spec.clustering().k()) +
                            "; every rank holds a shard of the class centres");
  }
  c.AtLeast("checkpoint_every_steps", t.checkpoint_every_steps(), 0);
  c.InRange("threads_per_worker", t.threads_per_worker(), 0, kMaxThreadsPerWorker);
  c.InRange("max_restarts", t.max_restarts(), 0, kMaxRestarts);
  c.InRange("heartbeat_timeout_seconds", t.heartbeat_timeout_seconds(), 1, kMaxTimeoutSeconds);
  c.InRange("collective_timeout_seconds", t.collective_timeout_seconds(), 1, kMaxTimeoutSeconds);
  c.InRange("label_prefetch_depth", t.label_prefetch_depth(), 1, kMaxLabelPrefetchDepth);
  c.AtLeast("rounds", t.rounds(), 1);
  if (t.rounds() > kMaxRounds)
    c.Add("rounds", Checker::Num(t.rounds()) + " > " + Checker::Num(kMaxRounds));
  if (!s.spec.clustering().label_set().empty()) {
    if (t.rounds() > 1) {
      c.Add("rounds", Checker::Num(t.rounds()) +
                          ": rounds > 1 needs clustering; a given label set trains one round "
                          "(set rounds: 1, or remove clustering.label_set)");
    }
    if (t.centre_init() == "centroids") {
      c.Add("centre_init",
            "'centroids' needs the round's k-means centroids, and a given label "
            "set has none; use 'auto' or 'random'");
    }
  }
  c.AtLeast("max_steps_per_epoch", t.max_steps_per_epoch(), 0);
  if (!(t.time_budget_minutes() >= 0 && t.time_budget_minutes() <= kMaxTimeBudgetMinutes)) {
    c.Add("time_budget_minutes", Checker::Num(t.time_budget_minutes()) + " is outside [0, " +
                                     Checker::Num(kMaxTimeBudgetMinutes) +
                                     "] (minutes of training per round; 0 = no budget)");
  }
  c.InRange("tensorboard_every_steps", t.tensorboard_every_steps(), 1, kMaxTensorboardEverySteps);
  c.OneOf("centre_init", t.centre_init(), {"auto", "random", "centroids"});
  c.OneOf("precision", t.precision(), PrecisionNames());
}

// evaluation (when enabled): kNN settings, feature kind and blocks, dataset format.
void CheckEvaluation(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const auto& e = s.spec.evaluation();
  Checker c(problems, s.prefix + "evaluation");
  if (e.enabled()) {
    c.InRange("knn_k", e.knn_k(), 1, kMaxKnnK);
    c.Positive("knn_temperature", e.knn_temperature());
    c.OneOf("features", e.features(), EvaluationFeatureKinds());
    c.AtLeast("feature_blocks", e.feature_blocks(), 1);
    if (s.spec.model().depth() > 0 && e.feature_blocks() > s.spec.model().depth())
      c.Add("feature_blocks", Checker::Num(e.feature_blocks()) + " > model.depth " +
                                  Checker::Num(s.spec.model().depth()) +
                                  "; use at most the model's depth");
    Checker d(problems, s.prefix + "evaluation.dataset");
    CheckDatasetSpec(d, e.dataset(), s.spec.model(), /*needs_test_split=*/true);
  }
}

// mcl (when present): the stages and their start, and what MCL decides itself (the loss,
// the rounds, the clustering's features and l); Eq. 4 when the training split's size is known.
void CheckMcl(const SectionContext& s, std::vector<SpecProblem>* problems) {
  const std::string infonce = ContrastiveVariantName(ContrastiveVariant::kInfoNce);
  if (!s.spec.has_mcl()) {
    // InfoNCE needs no labels: a later round would have nothing to cluster for.
    if (s.spec.loss().variant() == infonce && s.spec.training().rounds() > 1) {
      Checker t(problems, s.prefix + "training");
      t.Add("rounds", Checker::Num(s.spec.training().rounds()) +
                          " rounds of loss.variant infonce: InfoNCE trains on no labels, so "
                          "there is nothing to re-cluster between rounds; set rounds: 1, or "
                          "make it an MCL job (spec.mcl, docs/mcl.md)");
    }
    return;
  }
  const auto& m = s.spec.mcl();
  Checker c(problems, s.prefix + "mcl");
  c.InRange("stages", m.stages(), 1, kMaxMclStages);
  c.OneOf("stage_init", m.stage_init(), {"scratch", "previous"});
  if (s.spec.loss().variant() != infonce) {
    c.Add("stages", "an MCL job trains every stage with InfoNCE, but loss.variant is '" +
                        s.spec.loss().variant() + "'; set loss.variant: " + infonce);
  }
  if (s.spec.training().rounds() != m.stages()) {
    c.Add("stages", Checker::Num(m.stages()) + " stages, but training.rounds is " +
                        Checker::Num(s.spec.training().rounds()) +
                        "; an MCL stage is a round: leave training.rounds out");
  }
  const auto& cl = s.spec.clustering();
  if (!cl.label_set().empty()) {
    c.Add("stages", "MCL clusters its own stages; clustering.label_set '" + cl.label_set() +
                        "' cannot be used with it: remove one of them");
  }
  if (cl.features().kind() != "model" || !cl.features().paths().empty()) {
    c.Add("stages", "MCL clusters each stage's own embeddings, but clustering.features.kind is '" +
                        cl.features().kind() + "'; remove clustering.features");
  }
  if (cl.l() != 1) {
    c.Add("stages", "MCL keeps each sample's top-1 cluster, but clustering.l is " +
                        Checker::Num(cl.l()) + "; remove clustering.l or set it to 1");
  }
  const std::string prefix = s.prefix.empty() ? "" : s.prefix.substr(0, s.prefix.size() - 1);
  for (SpecProblem& p : MclClusterBudgetProblems(s.spec, s.images, prefix)) {
    p.message += " (" + s.images_text + ")";
    problems->push_back(std::move(p));
  }
}

}  // namespace

std::vector<SpecProblem> MclClusterBudgetProblems(const v1::JobSpec& spec, uint64_t samples,
                                                  const std::string& path_prefix) {
  std::vector<SpecProblem> problems;
  const int64_t k = spec.clustering().k();
  const int32_t n = spec.mcl().stages();
  const int64_t b = spec.training().batch_size();
  if (!spec.has_mcl() || samples == 0 || k < 1 || n < 1 || b < 1) return problems;
  // K^N, saturated above M (so it never overflows): K^N * b <= M is Eq. 4 in integers.
  uint64_t groups = 1;
  for (int i = 0; i < n && groups <= samples; ++i) groups *= static_cast<uint64_t>(k);
  if (groups <= samples / static_cast<uint64_t>(b)) return problems;
  const std::string power = std::to_string(k) + "^" + std::to_string(n);
  Checker c(&problems, path_prefix.empty() ? "mcl" : path_prefix + ".mcl");
  c.Add("stages",
        "K^N = clustering.k^stages = " + power + " = " +
            (groups > samples ? "more than " + std::to_string(samples) : std::to_string(groups)) +
            " > M / b = " + std::to_string(samples) + " samples / batch_size " + std::to_string(b) +
            " = " + Checker::Num(double(samples) / double(b)) +
            ": the pseudo-labels of the last stage could not each fill a global "
            "batch (the paper's Eq. 4); lower clustering.k, mcl.stages or "
            "training.batch_size, or train on more samples");
  return problems;
}

std::vector<SpecProblem> JobMetadataProblems(const v1::JobMetadata& metadata,
                                             const std::string& path_prefix) {
  std::vector<SpecProblem> problems;
  Checker c(&problems, path_prefix);
  const std::string& name = metadata.name();
  if (name.size() > kMaxJobNameLength)
    c.Add("name", "longer than " + Checker::Num(kMaxJobNameLength) + " characters");
  for (char ch : name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      c.Add("name", "'" + name + "' may only hold letters, digits, '-', '_' and '.'");
      break;
    }
  }
  for (const auto& [key, value] : metadata.labels()) {
    if (key.empty() || key.size() > kMaxJobLabelKeyLength) {
      c.Add("labels",
            "label keys must be 1 to " + Checker::Num(kMaxJobLabelKeyLength) + " characters");
    }
    if (value.size() > kMaxJobLabelValueLength) {
      c.Add("labels." + key,
            "value longer than " + Checker::Num(kMaxJobLabelValueLength) + " characters");
    }
  }
  return problems;
}

std::vector<SpecProblem> JobSpecProblems(const v1::JobSpec& spec, const std::string& path_prefix) {
  std::vector<SpecProblem> problems;
  const std::string p = path_prefix.empty() ? "" : path_prefix + ".";
  const uint64_t images = DatasetTrainingImages(spec.dataset());
  const std::string images_text =
      std::to_string(images) + " training images" +
      (spec.dataset().limit() ? " (" + p + "dataset.limit)" : " of " + spec.dataset().format());
  const SectionContext s{spec, p, images, images_text};
  CheckDataset(s, &problems);
  CheckClustering(s, &problems);
  CheckLoss(s, &problems);
  CheckMulcon(s, &problems);
  CheckModel(s, &problems);
  CheckActivations(s, &problems);
  CheckOptimizer(s, &problems);
  CheckTraining(s, &problems);
  CheckEvaluation(s, &problems);
  CheckMcl(s, &problems);
  return problems;
}

Status SpecProblemsToStatus(const std::vector<SpecProblem>& problems) {
  if (problems.empty()) return Status::Ok();
  std::string message = "invalid job spec (" + std::to_string(problems.size()) +
                        (problems.size() == 1 ? " problem" : " problems") + "):";
  // Every problem while they fit a gRPC error (kMaxErrorMessageBytes), then how many more.
  size_t listed = 0;
  for (const auto& p : problems) {
    std::string line = "\n  " + p.ToString();
    if (line.size() > 512) line = line.substr(0, 500) + " ...";
    if (message.size() + line.size() > kMaxErrorMessageBytes - 64) break;
    message += line;
    ++listed;
  }
  if (listed < problems.size()) {
    message += "\n  ... and " + std::to_string(problems.size() - listed) + " more problem" +
               (problems.size() - listed == 1 ? "" : "s") + " left out";
  }
  return Status::InvalidArgument(message);
}

}  // namespace mlcd
