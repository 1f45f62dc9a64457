// Real image datasets made at test time: tests/dataset/make_image_datasets.py encodes part
// of Fashion-MNIST with PIL into an image folder (with and without classes) and WebDataset
// shards (see the script's docstring for the layout).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::testing {

struct ImageDataOptions {
  int count = 32;
  std::string format = "png";  // png | jpeg | webp | mixed
  bool rgb = false;
  int size = 0;  // 0 = 28
  int shards = 4;
  std::string split = "train";
  std::string key_prefix;  // directory prefix of tar member names
  bool bad = false;        // append the script's four undecodable samples
};

// Writes the layouts under `out`; the script's output on failure.
Status MakeImageDatasets(const std::string& out, const ImageDataOptions& options = {});

// The lines of a text file (keys.txt, labels.txt).
std::vector<std::string> ReadLines(const std::string& path);

}  // namespace mlcd::testing
