// SimCLR's colour augmentations on prepared training images: colour jitter (torchvision's
// ColorJitter: brightness, contrast, saturation, hue in a random order) applied with a
// probability, and random grayscale. Each sample's draws come from (seed, round, epoch, id,
// view) (AugmentDraws in worker/train/dataset.h), so they depend neither on the batch nor on
// the rank. docs/data.md lists the options and SimCLR's values.
//
// The operations work on pixels in [0, 1]: the prepared (normalised) images are mapped back
// with the dataset's mean and stddev, changed, clamped to [0, 1] after every operation (as
// torchvision's tensor ops do), and normalised again. With colour_jitter_prob and
// grayscale_prob 0 nothing is touched (not even the round trip).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "worker/train/dataset.h"

namespace mlcd::worker {

// The colour draws of one sample (exposed for tests).
struct ColourDraw {
  bool jitter = false;                                  // colour jitter applies to this sample
  double brightness = 1, contrast = 1, saturation = 1;  // factors (1 = unchanged)
  double hue = 0;                                       // shift, a fraction of the wheel
  // The order of the four operations: a permutation of 0 brightness, 1 contrast,
  // 2 saturation, 3 hue.
  int order[4] = {0, 1, 2, 3};
  bool grayscale = false;
};
ColourDraw DrawColour(const AugmentOptions& options, int round, int epoch, int64_t id);

// Whether `options` changes colours at all (jitter or grayscale with a probability > 0).
bool ColourAugmentationOn(const AugmentOptions& options);

// Applies the drawn colour operations to `images` (float [n, C, S, S], normalised with
// `mean` / `stddev`, sample `ids[i]` in row i) in place. Saturation, hue and grayscale act on
// 3-channel images only (a 1-channel image is its own grayscale).
void ApplyColourAugmentation(torch::Tensor& images, const std::vector<int64_t>& ids,
                             const AugmentOptions& options, int round, int epoch,
                             const std::vector<float>& mean, const std::vector<float>& stddev);

// The colour-space helpers, on float [3, H, W] in [0, 1] (torchvision's _rgb2hsv / _hsv2rgb
// and rgb_to_grayscale), exposed for tests.
torch::Tensor RgbToHsv(const torch::Tensor& rgb);
torch::Tensor HsvToRgb(const torch::Tensor& hsv);
torch::Tensor Grayscale(const torch::Tensor& rgb);  // [1, H, W]

}  // namespace mlcd::worker
