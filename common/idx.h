// IDX files (the MNIST / Fashion-MNIST format), gzipped or not.
// Fashion-MNIST from Debian's dataset-fashion-mnist lives in kFashionMnistDir as
// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Fashion-MNIST images are grey: one channel.
inline constexpr int kFashionMnistChannels = 1;

struct IdxImages {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
};

// Reads an idx3-ubyte file (magic 0x00000803). `limit` > 0 keeps only the first `limit`.
StatusOr<IdxImages> ReadIdxImages(const std::string& path, int64_t limit = 0);
// Reads an idx1-ubyte file (magic 0x00000801).
StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, int64_t limit = 0);

// Paths of a split ("train" or "test") in an MNIST-style directory: tries the .gz and the
// plain names. NOT_FOUND with a hint to install dataset-fashion-mnist when absent.
Status FindMnistSplit(const std::string& dir, const std::string& split, std::string* images_path,
                      std::string* labels_path);

}  // namespace mlcd
