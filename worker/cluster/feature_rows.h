// A rank's rows of round-0 feature shards (.npy, float32 or float16, n x d each, the
// convention of CLIP embedding dumps): the shards in order form the global rows, and rank r
// of W reads only its contiguous range (EvenSplitBegin) from the memory maps, converted to
// float32 and normalised to unit L2 norm, into a tensor on its device. Nothing passes through
// clusterd. Files are checked when opened: every shard 2-d, the same dimension (a differing
// one is INVALID_ARGUMENT naming both files and dimensions), float32/float16.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/npy.h"
#include "common/status.h"

namespace mlcd::worker::cluster {

class FeatureRows {
 public:
  static StatusOr<FeatureRows> Open(const std::vector<std::string>& paths);

  int64_t rows() const { return total_rows_; }
  int64_t d() const { return d_; }
  // Global rows [begin, end) as an (end - begin) x d float32 tensor of unit rows on `device`.
  at::Tensor Read(int64_t begin, int64_t end, const at::Device& device) const;

 private:
  std::vector<MappedNpy> shards_;
  std::vector<int64_t> first_row_;  // global row of each shard's first row
  int64_t total_rows_ = 0;
  int64_t d_ = 0;
};

}  // namespace mlcd::worker::cluster
