#include "clusterd/feature_gen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/random.h"

namespace mlcd::clusterd {
namespace {

// Mixture rows draw from mlcd::SplitMix (common/random.h), a counter-based generator: the
// stream of row i depends only on (seed, i), so files come out the same whatever the thread
// count or chunking.
constexpr uint64_t kCentresStream = 0x63656e7472657321ULL;  // "centres!"

// Fashion-MNIST rows are computed in blocks of this many images, in parallel.
constexpr int64_t kFashionMnistBlock = 256;

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
  const FashionMnistFeatureSpec& spec = options;
  MLCD_RETURN_IF_ERROR(CheckFashionMnistFeatureSpec(spec));
  MLCD_RETURN_IF_ERROR(CheckDtype(options.dtype));

  std::string images_path, labels_path;
  MLCD_RETURN_IF_ERROR(FindMnistSplit(spec.dataset_dir, spec.split, &images_path, &labels_path));
  MLCD_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path, options.limit));
  const int64_t n = images.count;
  if (n == 0) return Status::InvalidArgument(images_path + ": holds no images");
  MLCD_ASSIGN_OR_RETURN(FashionMnistFeatureMap map,
                        FashionMnistFeatureMap::Create(spec, images.rows * images.cols));

  FeatureFileInfo info;
  info.rows = n;
  info.d = map.d();
  std::vector<float> features(static_cast<size_t>(n) * info.d);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kFashionMnistBlock) {
    map.Compute(images.pixels.data() + b * map.pixels_per_image(),
                std::min(kFashionMnistBlock, n - b), features.data() + b * info.d);
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
    SplitMix rng(StreamSeed(StreamSeed(options.seed, kCentresStream), static_cast<uint64_t>(c)));
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
    SplitMix rng(StreamSeed(options.seed, static_cast<uint64_t>(i)));
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
