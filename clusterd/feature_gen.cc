#include "clusterd/feature_gen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/random.h"

namespace mlcd::clusterd {
namespace {

// Rows draw from mlcd::SplitMix (common/random.h), a counter-based generator: the stream of
// row i depends only on (seed, i), so files come out the same whatever the thread count or
// chunking.

// The seed of the stream of `b` within the stream family `a`.
uint64_t Mix(uint64_t a, uint64_t b) {
  SplitMix m(a * 0x9e3779b97f4a7c15ULL + b);
  m.Next();
  return m.Next();
}

constexpr uint64_t kCentresStream = 0x63656e7472657321ULL;     // "centres!"
constexpr uint64_t kProjectionStream = 0x70726f6a65637421ULL;  // "project!"

Status WriteMatrix(const std::string& path, NpyDtype dtype, int64_t rows, int d,
                   const std::vector<float>& data) {
  if (dtype == NpyDtype::kFloat32) return WriteNpy(path, dtype, {rows, d}, data.data());
  std::vector<uint16_t> half(data.size());
  for (size_t i = 0; i < data.size(); ++i) half[i] = FloatToHalf(data[i]);
  return WriteNpy(path, NpyDtype::kFloat16, {rows, d}, half.data());
}

Status CheckDtype(NpyDtype dtype) {
  if (dtype != NpyDtype::kFloat32 && dtype != NpyDtype::kFloat16)
    return Status::InvalidArgument(std::string("feature dtype must be float32 or float16, not ") +
                                   NpyDtypeName(dtype));
  return Status::Ok();
}

Status MakeParentDirs(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return Status::Ok();
  return MakeConfinedDirs(path.substr(0, slash));
}

}  // namespace

StatusOr<FeatureFileInfo> WriteFashionMnistFeatures(const FashionMnistFeatureOptions& options) {
  if (options.features_out.empty())
    return Status::InvalidArgument("features_out (the output .npy path) is required");
  if (options.kind != "pixels" && options.kind != "random-projection")
    return Status::InvalidArgument("unknown Fashion-MNIST feature kind '" + options.kind +
                                   "'; use pixels or random-projection");
  if (options.split != "train" && options.split != "test")
    return Status::InvalidArgument("unknown split '" + options.split + "'; use train or test");
  if (options.limit < 0) return Status::InvalidArgument("limit must be >= 0 (0 = all images)");
  if (options.kind == "random-projection" && (options.dim < 1 || options.dim > 65536))
    return Status::InvalidArgument("random-projection dim must be in [1, 65536], got " +
                                   std::to_string(options.dim));
  MLCD_RETURN_IF_ERROR(CheckDtype(options.dtype));

  std::string images_path, labels_path;
  MLCD_RETURN_IF_ERROR(
      FindMnistSplit(options.dataset_dir, options.split, &images_path, &labels_path));
  MLCD_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path, options.limit));
  const int64_t n = images.count;
  const int in_dim = images.rows * images.cols;
  if (n == 0) return Status::InvalidArgument(images_path + ": holds no images");

  FeatureFileInfo info;
  info.rows = n;
  std::vector<float> features;
  if (options.kind == "pixels") {
    info.d = in_dim;
    features.resize(static_cast<size_t>(n) * in_dim);
    for (size_t i = 0; i < features.size(); ++i) features[i] = images.pixels[i] * (1.0f / 255.0f);
  } else {
    const int dim = options.dim;
    info.d = dim;
    // Projection matrix, in_dim x dim, entries N(0, 1/dim).
    std::vector<float> proj(static_cast<size_t>(in_dim) * dim);
    SplitMix rng(Mix(options.seed, kProjectionStream));
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    for (auto& v : proj) v = static_cast<float>(rng.Gaussian() * scale);
    features.assign(static_cast<size_t>(n) * dim, 0.0f);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* px = images.pixels.data() + i * in_dim;
      float* out = features.data() + i * dim;
      for (int j = 0; j < in_dim; ++j) {
        if (px[j] == 0) continue;
        float v = px[j] * (1.0f / 255.0f);
        const float* r = proj.data() + static_cast<size_t>(j) * dim;
        for (int c = 0; c < dim; ++c) out[c] += v * r[c];
      }
    }
  }
  MLCD_RETURN_IF_ERROR(MakeParentDirs(options.features_out));
  MLCD_RETURN_IF_ERROR(WriteMatrix(options.features_out, options.dtype, n, info.d, features));
  info.feature_paths.push_back(options.features_out);

  if (!options.labels_out.empty()) {
    MLCD_ASSIGN_OR_RETURN(std::vector<uint8_t> labels, ReadIdxLabels(labels_path, options.limit));
    if (static_cast<int64_t>(labels.size()) != n) {
      return Status::DataLoss(labels_path + ": holds " + std::to_string(labels.size()) +
                              " labels for " + std::to_string(n) + " images");
    }
    std::vector<int64_t> wide(labels.begin(), labels.end());
    MLCD_RETURN_IF_ERROR(MakeParentDirs(options.labels_out));
    MLCD_RETURN_IF_ERROR(WriteNpy(options.labels_out, NpyDtype::kInt64, {n}, wide.data()));
    info.labels_path = options.labels_out;
  }
  return info;
}

void SyntheticMixtureCentres(const SyntheticMixtureOptions& options, std::vector<float>* centres) {
  const int d = options.dim;
  centres->assign(static_cast<size_t>(options.num_centres) * d, 0.0f);
  for (int c = 0; c < options.num_centres; ++c) {
    SplitMix rng(Mix(Mix(options.seed, kCentresStream), static_cast<uint64_t>(c)));
    double s = 0;
    std::vector<double> v(d);
    for (int j = 0; j < d; ++j) {
      v[j] = rng.Gaussian();
      s += v[j] * v[j];
    }
    double inv = 1.0 / std::sqrt(s);
    for (int j = 0; j < d; ++j)
      (*centres)[static_cast<size_t>(c) * d + j] = static_cast<float>(v[j] * inv);
  }
}

void SyntheticMixtureRows(const SyntheticMixtureOptions& options, int64_t begin, int64_t end,
                          float* rows, int64_t* components) {
  std::vector<float> centres;
  SyntheticMixtureCentres(options, &centres);
  const int d = options.dim;
  const double noise = options.noise / std::sqrt(static_cast<double>(d));
#pragma omp parallel for schedule(static) if (end - begin >= 4096)
  for (int64_t i = begin; i < end; ++i) {
    SplitMix rng(Mix(options.seed, static_cast<uint64_t>(i)));
    int64_t c = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(options.num_centres));
    float* out = rows + (i - begin) * d;
    const float* centre = centres.data() + c * d;
    double s = 0;
    for (int j = 0; j < d; ++j) {
      double v = centre[j] + noise * rng.Gaussian();
      out[j] = static_cast<float>(v);
      s += v * v;
    }
    float inv = static_cast<float>(1.0 / std::sqrt(s));
    for (int j = 0; j < d; ++j) out[j] *= inv;
    if (components) components[i - begin] = c;
  }
}

StatusOr<FeatureFileInfo> WriteSyntheticMixture(const SyntheticMixtureOptions& options) {
  if (options.out_dir.empty())
    return Status::InvalidArgument("out_dir (directory for the shards) is required");
  if (options.rows < 1) return Status::InvalidArgument("rows must be >= 1");
  if (options.dim < 1 || options.dim > 65536)
    return Status::InvalidArgument("dim must be in [1, 65536]");
  if (options.num_centres < 1) return Status::InvalidArgument("num_centres must be >= 1");
  if (options.shards < 1 || options.shards > options.rows)
    return Status::InvalidArgument("shards must be in [1, rows]");
  if (!(options.noise >= 0)) return Status::InvalidArgument("noise must be >= 0");
  MLCD_RETURN_IF_ERROR(CheckDtype(options.dtype));
  MLCD_RETURN_IF_ERROR(MakeDirs(options.out_dir));

  FeatureFileInfo info;
  info.rows = options.rows;
  info.d = options.dim;
  std::vector<int64_t> all_components;
  if (!options.labels_out.empty()) all_components.resize(static_cast<size_t>(options.rows));
  std::vector<float> buf;
  for (int s = 0; s < options.shards; ++s) {
    int64_t begin = options.rows * s / options.shards;
    int64_t end = options.rows * (s + 1) / options.shards;
    buf.resize(static_cast<size_t>(end - begin) * options.dim);
    SyntheticMixtureRows(options, begin, end, buf.data(),
                         all_components.empty() ? nullptr : all_components.data() + begin);
    char name[32];
    std::snprintf(name, sizeof(name), "/shard-%05d.npy", s);
    std::string path = options.out_dir + name;
    MLCD_RETURN_IF_ERROR(WriteMatrix(path, options.dtype, end - begin, options.dim, buf));
    info.feature_paths.push_back(path);
  }
  if (!options.centres_out.empty()) {
    std::vector<float> centres;
    SyntheticMixtureCentres(options, &centres);
    MLCD_RETURN_IF_ERROR(MakeParentDirs(options.centres_out));
    MLCD_RETURN_IF_ERROR(WriteNpy(options.centres_out, NpyDtype::kFloat32,
                                  {options.num_centres, options.dim}, centres.data()));
    info.centres_path = options.centres_out;
  }
  if (!options.labels_out.empty()) {
    MLCD_RETURN_IF_ERROR(MakeParentDirs(options.labels_out));
    MLCD_RETURN_IF_ERROR(
        WriteNpy(options.labels_out, NpyDtype::kInt64, {options.rows}, all_components.data()));
    info.labels_path = options.labels_out;
  }
  return info;
}

}  // namespace mlcd::clusterd
