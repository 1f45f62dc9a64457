// Round-0 features of Fashion-MNIST when no embedding model exists yet (docs/clusterd.md,
// "Round-0 features"): one definition of the rows, shared by mlcd-clusterd, which writes them
// into its feature cache (clusterd/feature_gen.h), and by the clustering gang, where each
// rank computes only its own rows (worker/cluster/feature_rows.h). Both get the same float32
// values for the same spec, bit for bit.
//
//   "pixels"             the 784 pixel values of an image scaled to [0, 1] (row-major 28 x 28)
//   "random-projection"  those values times a fixed Gaussian matrix (pixels x dim, entries
//                        N(0, 1/dim)) drawn from `seed`: a Johnson-Lindenstrauss projection
//
// Row i is sample id i: the i-th image of the split (docs/contracts.md).
//
//   MLCD_ASSIGN_OR_RETURN(FashionMnistShape shape, ReadFashionMnistShape(spec));
//   MLCD_ASSIGN_OR_RETURN(FashionMnistFeatureMap map,
//                         FashionMnistFeatureMap::Create(spec, shape.pixels_per_image));
//   map.Compute(pixels + begin * shape.pixels_per_image, end - begin, out);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/idx.h"
#include "common/status.h"
#include "mlcd/v1/clusterd.pb.h"

namespace mlcd {

// The most output dimensions a projection may have.
inline constexpr int kMaxFashionMnistFeatureDim = 65536;

struct FashionMnistFeatureSpec {
  // "pixels" or "random-projection".
  std::string kind = "pixels";
  // "train" (60000 images) or "test" (10000).
  std::string split = "train";
  // Keep only the first `limit` images (0 = all). Sample ids are then 0..limit-1.
  int64_t limit = 0;
  // Output dimension of "random-projection" (ignored for "pixels").
  int dim = 128;
  // Seed of the projection matrix.
  uint64_t seed = 0;
  // Where the IDX files are.
  std::string dataset_dir = kFashionMnistDir;
};

// The spec of a request's or assignment's GeneratedFeatures (clusterd.proto), its defaults
// applied: dim 0 = 128, split "" = train, dataset_path "" = the packaged Fashion-MNIST.
// INVALID_ARGUMENT for a dataset_format other than fashion-mnist (or empty). Paths are taken
// as they are (the caller resolves or confines them).
StatusOr<FashionMnistFeatureSpec> FashionMnistSpecOf(const v1::GeneratedFeatures& generated);

// INVALID_ARGUMENT naming the field when the kind, split, limit or dim is not allowed.
Status CheckFashionMnistFeatureSpec(const FashionMnistFeatureSpec& spec);

// The map from an image's pixels to its feature row. Thread-safe once created; a row's
// values depend on its pixels alone, never on the rows beside it or the thread count.
class FashionMnistFeatureMap {
 public:
  // Checks the spec and, for "random-projection", draws the matrix (pixels_per_image x dim).
  static StatusOr<FashionMnistFeatureMap> Create(const FashionMnistFeatureSpec& spec,
                                                 int pixels_per_image);

  int pixels_per_image() const { return pixels_per_image_; }
  // The feature dimension: pixels_per_image, or dim for "random-projection".
  int d() const { return d_; }
  // The features of `n` images (`pixels`, n x pixels_per_image(), row-major) into `out`
  // (n x d(), float32, overwritten).
  void Compute(const uint8_t* pixels, int64_t n, float* out) const;

 private:
  int pixels_per_image_ = 0;
  int d_ = 0;
  std::vector<float> projection_;  // pixels_per_image x d; empty for "pixels"
};

// What a spec's split holds, from the labels file and the images' header (no image is
// decoded): the rows (images kept after `limit`), the image size and the feature dimension.
struct FashionMnistShape {
  std::string images_path;
  std::string labels_path;
  int64_t rows = 0;
  int pixels_per_image = 0;
  int d = 0;
};

// NOT_FOUND with an install hint when the dataset is missing; INVALID_ARGUMENT on a bad spec or
// a split without images; DATA_LOSS when the images and labels files disagree on the count.
StatusOr<FashionMnistShape> ReadFashionMnistShape(const FashionMnistFeatureSpec& spec);

}  // namespace mlcd
