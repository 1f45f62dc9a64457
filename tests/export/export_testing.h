// Checkpoints and model inputs made at test time for the export suites (export_test.cc,
// hf_export_test.cc).
#pragma once

#include <string>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd::testing {

// A job spec with the given model fields (protobuf JSON, as spec.json holds it), seed 3.
v1::JobSpec ModelSpec(int channels, int image, int patch, int width, int depth, int heads,
                      double mlp_ratio, int embed, const std::string& pooling,
                      const std::string& stem);

// Writes a checkpoint of `spec`'s model under `root` whose every parameter is moved away from
// its initial value (LayerNorm weights off 1, biases off 0), so a tensor mapped to the wrong
// place changes the output. Returns the checkpoint directory ("" after a test failure).
std::string WriteTestCheckpoint(const std::string& root, const v1::JobSpec& spec);

// Model inputs [n, channels, s, s] float32 .npy: smooth colour patterns and noise, as
// preprocessed images look.
Status WriteImages(const std::string& path, int n, int channels, int s);

// The first n Fashion-MNIST test images as model inputs [n, 1, s, s]: the worker's own
// evaluation preprocessing (scaling, the dataset's normalisation, resize to s).
Status WriteFashionMnistImages(const std::string& path, int n, int s);

}  // namespace mlcd::testing
