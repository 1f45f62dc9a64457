#include "worker/train/image_bytes.h"

namespace mlcd::worker {

PixelScaleShift PixelScaleShiftOn(const PixelNormalisation& norm, const torch::Device& device) {
  TORCH_CHECK(!norm.mean.empty() && norm.stddev.size() == norm.mean.size(),
              "image normalisation has ", norm.mean.size(), " means and ", norm.stddev.size(),
              " standard deviations");
  // PrepareImages's arithmetic, in float.
  std::vector<float> scale(norm.mean.size()), shift(norm.mean.size());
  for (size_t i = 0; i < norm.mean.size(); ++i) {
    scale[i] = 1.0f / (255.0f * norm.stddev[i]);
    shift[i] = -norm.mean[i] / norm.stddev[i];
  }
  return {torch::tensor(scale).view({1, -1, 1, 1}).to(device),
          torch::tensor(shift).view({1, -1, 1, 1}).to(device)};
}

torch::Tensor QuantiseImages(const torch::Tensor& input, const PixelNormalisation& norm) {
  TORCH_CHECK(input.dim() == 4 && input.scalar_type() == torch::kFloat,
              "QuantiseImages takes float [n, C, H, W], got ", input.sizes(), " ",
              input.scalar_type());
  torch::NoGradGuard no_grad;
  const PixelScaleShift s = PixelScaleShiftOn(norm, input.device());
  TORCH_CHECK(s.scale.size(1) == input.size(1), "QuantiseImages: ", input.size(1),
              " channels, normalisation of ", s.scale.size(1));
  return ((input - s.shift) / s.scale).round_().clamp_(0, 255).to(torch::kUInt8);
}

torch::Tensor NormaliseImages(const torch::Tensor& pixels, const PixelScaleShift& s) {
  TORCH_CHECK(pixels.dim() == 4 && pixels.scalar_type() == torch::kUInt8 &&
                  s.scale.size(1) == pixels.size(1),
              "NormaliseImages takes uint8 [n, ", s.scale.size(1), ", H, W], got ", pixels.sizes(),
              " ", pixels.scalar_type());
  torch::NoGradGuard no_grad;
  torch::Tensor out = pixels.to(torch::kFloat);
  return out.mul_(s.scale).add_(s.shift);
}

}  // namespace mlcd::worker
