// A rank's rows of a round's features, from one of two sources, and nothing passes through
// clusterd:
//   - feature shards (.npy, float32 or float16, n x d each, the convention of CLIP embedding
//     dumps): the shards in order form the global rows, read from their memory maps. Files are
//     checked when opened: every shard 2-d, the same dimension (a differing one is
//     INVALID_ARGUMENT naming both files and dimensions), float32/float16.
//   - round-0 features of Fashion-MNIST (clusterd.proto GeneratedFeatures: pixels or
//     random-projection), computed for the rows asked only, with the values clusterd would
//     write into its feature file (common/fashion_mnist_features.h); row i is image i of the
//     split, and the split's IDX labels are the rows' true classes.
// Rank r of W reads its contiguous range (EvenSplitBegin), converted to float32 and normalised
// to unit L2 norm, into a tensor on its device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fashion_mnist_features.h"
#include "common/npy.h"
#include "common/status.h"
#include "mlcd/v1/clusterd.pb.h"

namespace mlcd::worker::cluster {

class FeatureRows {
 public:
  static StatusOr<FeatureRows> Open(const std::vector<std::string>& paths);
  // Reads the split's labels and image header only (the row count, the dimension) and draws
  // the projection; INVALID_ARGUMENT / NOT_FOUND as ReadFashionMnistShape.
  static StatusOr<FeatureRows> OpenGenerated(const v1::GeneratedFeatures& generated);

  int64_t rows() const { return total_rows_; }
  int64_t d() const { return d_; }
  // Global rows [begin, end) as an (end - begin) x d float32 tensor of unit rows on `device`.
  // Generated rows decode the images up to `end` (the IDX files are read from their start)
  // and compute rows [begin, end) alone; DATA_LOSS when the images file holds fewer.
  StatusOr<at::Tensor> Read(int64_t begin, int64_t end, const at::Device& device) const;
  // The true classes of rows [begin, end) for generated rows; empty for shards (their classes,
  // when known, are a file of the assignment).
  std::vector<int64_t> Classes(int64_t begin, int64_t end) const;

 private:
  struct Generated {
    FashionMnistShape shape;
    FashionMnistFeatureMap map;
    std::vector<uint8_t> classes;  // rows
  };
  StatusOr<at::Tensor> ComputeGenerated(int64_t begin, int64_t end) const;

  std::vector<MappedNpy> shards_;
  std::vector<int64_t> first_row_;  // global row of each shard's first row
  std::optional<Generated> generated_;
  int64_t total_rows_ = 0;
  int64_t d_ = 0;
};

}  // namespace mlcd::worker::cluster
