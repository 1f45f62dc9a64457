#include "common/fashion_mnist_features.h"

#include <cmath>

#include "common/random.h"

namespace mlcd {
namespace {

// The projection's draws: one SplitMix stream of the seed (common/random.h, StreamSeed).
constexpr uint64_t kProjectionStream = 0x70726f6a65637421ULL;  // "project!"

}  // namespace

StatusOr<FashionMnistFeatureSpec> FashionMnistSpecOf(const v1::GeneratedFeatures& generated) {
  if (!generated.dataset_format().empty() && generated.dataset_format() != "fashion-mnist")
    return Status::InvalidArgument("generated features of dataset format '" +
                                   generated.dataset_format() +
                                   "': only fashion-mnist round-0 features are made");
  FashionMnistFeatureSpec spec;
  spec.kind = generated.kind();
  if (!generated.split().empty()) spec.split = generated.split();
  spec.limit = static_cast<int64_t>(generated.limit());
  if (generated.dim() != 0) spec.dim = generated.dim();
  spec.seed = generated.seed();
  if (!generated.dataset_path().empty()) spec.dataset_dir = generated.dataset_path();
  return spec;
}

Status CheckFashionMnistFeatureSpec(const FashionMnistFeatureSpec& spec) {
  if (spec.kind != "pixels" && spec.kind != "random-projection")
    return Status::InvalidArgument("unknown Fashion-MNIST feature kind '" + spec.kind +
                                   "'; use pixels or random-projection");
  if (spec.split != "train" && spec.split != "test")
    return Status::InvalidArgument("unknown split '" + spec.split + "'; use train or test");
  if (spec.limit < 0) return Status::InvalidArgument("limit must be >= 0 (0 = all images)");
  if (spec.kind == "random-projection" && (spec.dim < 1 || spec.dim > kMaxFashionMnistFeatureDim))
    return Status::InvalidArgument("random-projection dim must be in [1, " +
                                   std::to_string(kMaxFashionMnistFeatureDim) + "], got " +
                                   std::to_string(spec.dim));
  return Status::Ok();
}

StatusOr<FashionMnistFeatureMap> FashionMnistFeatureMap::Create(const FashionMnistFeatureSpec& spec,
                                                                int pixels_per_image) {
  MLCD_RETURN_IF_ERROR(CheckFashionMnistFeatureSpec(spec));
  if (pixels_per_image < 1)
    return Status::InvalidArgument("images of " + std::to_string(pixels_per_image) + " pixels");
  FashionMnistFeatureMap map;
  map.pixels_per_image_ = pixels_per_image;
  if (spec.kind == "pixels") {
    map.d_ = pixels_per_image;
    return map;
  }
  map.d_ = spec.dim;
  // Entries N(0, 1/dim), row-major pixels_per_image x dim.
  map.projection_.resize(static_cast<size_t>(pixels_per_image) * spec.dim);
  SplitMix rng(StreamSeed(spec.seed, kProjectionStream));
  const double scale = 1.0 / std::sqrt(static_cast<double>(spec.dim));
  for (float& v : map.projection_) v = static_cast<float>(rng.Gaussian() * scale);
  return map;
}

void FashionMnistFeatureMap::Compute(const uint8_t* pixels, int64_t n, float* out) const {
  const int in_dim = pixels_per_image_;
  if (projection_.empty()) {
    const size_t count = static_cast<size_t>(n) * in_dim;
    for (size_t i = 0; i < count; ++i) out[i] = pixels[i] * (1.0f / 255.0f);
    return;
  }
  const int dim = d_;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* px = pixels + i * in_dim;
    float* row = out + i * dim;
    for (int c = 0; c < dim; ++c) row[c] = 0.0f;
    for (int j = 0; j < in_dim; ++j) {
      if (px[j] == 0) continue;
      const float v = px[j] * (1.0f / 255.0f);
      const float* r = projection_.data() + static_cast<size_t>(j) * dim;
      for (int c = 0; c < dim; ++c) row[c] += v * r[c];
    }
  }
}

StatusOr<FashionMnistShape> ReadFashionMnistShape(const FashionMnistFeatureSpec& spec) {
  MLCD_RETURN_IF_ERROR(CheckFashionMnistFeatureSpec(spec));
  FashionMnistShape shape;
  MLCD_RETURN_IF_ERROR(
      FindMnistSplit(spec.dataset_dir, spec.split, &shape.images_path, &shape.labels_path));
  MLCD_ASSIGN_OR_RETURN(IdxImages first, ReadIdxImages(shape.images_path, 1));
  if (first.count == 0) return Status::InvalidArgument(shape.images_path + ": holds no images");
  MLCD_ASSIGN_OR_RETURN(std::vector<uint8_t> labels,
                        ReadIdxLabels(shape.labels_path, spec.limit));
  shape.rows = static_cast<int64_t>(labels.size());
  if (shape.rows == 0) return Status::InvalidArgument(shape.labels_path + ": holds no labels");
  shape.pixels_per_image = first.rows * first.cols;
  shape.d = spec.kind == "pixels" ? shape.pixels_per_image : spec.dim;
  return shape;
}

}  // namespace mlcd
