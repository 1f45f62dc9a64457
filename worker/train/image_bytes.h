// Batches cross to a device as bytes. The loader makes the model's float input on the host
// (augmentation, resize, colour jitter, normalisation: worker/train/dataset.h), then
// QuantiseImages turns it back into the uint8 pixel values it stands for: a quarter of the
// float32 bytes to copy and to page-lock. NormaliseImages makes the float input again where the
// step runs, with the host's own arithmetic (v * 1/(255 std) + (-mean/std)), so a pixel that no
// resize or jitter touched gives the same float bits on either side; a resized or jittered one
// moves by at most half a grey level (0.5 / (255 std) in the model's units).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace mlcd::worker {

// The dataset's per-channel normalisation (ImageDataset::mean() / stddev()), of the pixel
// values scaled to [0, 1].
struct PixelNormalisation {
  std::vector<float> mean;
  std::vector<float> stddev;
};

// The normalisation as the host computes it, scale 1 / (255 std) and shift -mean / std, as
// float [1, C, 1, 1] tensors on `device`. Each is a copy from the host: make them once per
// device, not per step.
struct PixelScaleShift {
  torch::Tensor scale, shift;
};
PixelScaleShift PixelScaleShiftOn(const PixelNormalisation& norm, const torch::Device& device);

// float [n, C, H, W] model input -> uint8 [n, C, H, W]: the nearest pixel value, clamped to
// [0, 255]. C must equal the normalisation's channel count.
torch::Tensor QuantiseImages(const torch::Tensor& input, const PixelNormalisation& norm);

// uint8 [n, C, H, W] -> float [n, C, H, W] model input, on the pixels' device (where `s` must
// be too).
torch::Tensor NormaliseImages(const torch::Tensor& pixels, const PixelScaleShift& s);

}  // namespace mlcd::worker
