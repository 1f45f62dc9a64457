#include "worker/train/colour_augment.h"

#include <algorithm>
#include <cmath>

namespace mlcd::worker {
namespace {

// Uniform in [0, 1) from 15 bits of `h` starting at bit 15 * k.
double Uniform15(uint64_t h, int k) {
  return static_cast<double>((h >> (15 * k)) & 0x7FFF) / 32768.0;
}

// A factor uniform in [max(0, 1 - strength), 1 + strength] (1 when the strength is 0).
double Factor(double strength, double u) {
  if (strength <= 0) return 1.0;
  const double lo = std::max(0.0, 1.0 - strength);
  return lo + (1.0 + strength - lo) * u;
}

torch::Tensor Blend(const torch::Tensor& x, const torch::Tensor& other, double factor) {
  return (x * factor + other * (1.0 - factor)).clamp(0.0, 1.0);
}

}  // namespace

bool ColourAugmentationOn(const AugmentOptions& o) {
  return o.enabled && (o.color_jitter_prob > 0 || o.grayscale_prob > 0);
}

ColourDraw DrawColour(const AugmentOptions& o, int round, int epoch, int64_t id) {
  ColourDraw d;
  if (!o.enabled) return d;
  const uint64_t factors = AugmentHash(o, 0x4A495421ull /* "JIT!" */, round, epoch, id);
  const uint64_t choices = AugmentHash(o, 0x4A495432ull /* "JIT2" */, round, epoch, id);
  d.jitter = o.color_jitter_prob > 0 && Uniform15(choices, 0) < o.color_jitter_prob;
  d.grayscale = o.grayscale_prob > 0 && Uniform15(choices, 1) < o.grayscale_prob;
  if (d.jitter) {
    d.brightness = Factor(o.jitter_brightness, Uniform15(factors, 0));
    d.contrast = Factor(o.jitter_contrast, Uniform15(factors, 1));
    d.saturation = Factor(o.jitter_saturation, Uniform15(factors, 2));
    d.hue = o.jitter_hue * (2.0 * Uniform15(factors, 3) - 1.0);
    // The permutation of rank (bits 30..44 of `choices`) mod 24, by the factorial number system.
    int rank = static_cast<int>(((choices >> 30) & 0x7FFF) % 24);
    std::vector<int> left = {0, 1, 2, 3};
    for (int i = 0; i < 4; ++i) {
      int radix = 1;
      for (int k = 2; k <= 3 - i; ++k) radix *= k;
      const int pick = rank / radix;
      rank %= radix;
      d.order[i] = left[static_cast<size_t>(pick)];
      left.erase(left.begin() + pick);
    }
  }
  return d;
}

torch::Tensor Grayscale(const torch::Tensor& rgb) {
  return (rgb[0] * 0.299 + rgb[1] * 0.587 + rgb[2] * 0.114).unsqueeze(0);
}

torch::Tensor RgbToHsv(const torch::Tensor& rgb) {
  const torch::Tensor r = rgb[0], g = rgb[1], b = rgb[2];
  const torch::Tensor maxc = std::get<0>(rgb.max(0)), minc = std::get<0>(rgb.min(0));
  const torch::Tensor eqc = maxc == minc;
  const torch::Tensor cr = maxc - minc;
  const torch::Tensor ones = torch::ones_like(maxc);
  const torch::Tensor s = cr / torch::where(eqc, ones, maxc);
  const torch::Tensor cr_divisor = torch::where(eqc, ones, cr);
  const torch::Tensor rc = (maxc - r) / cr_divisor, gc = (maxc - g) / cr_divisor,
                      bc = (maxc - b) / cr_divisor;
  const torch::Tensor hr = (maxc == r).to(rgb.scalar_type()) * (bc - gc);
  const torch::Tensor hg = ((maxc == g) & (maxc != r)).to(rgb.scalar_type()) * (2.0 + rc - bc);
  const torch::Tensor hb = ((maxc != g) & (maxc != r)).to(rgb.scalar_type()) * (4.0 + gc - rc);
  torch::Tensor h = torch::fmod((hr + hg + hb) / 6.0 + 1.0, 1.0);
  return torch::stack({h, s, maxc});
}

torch::Tensor HsvToRgb(const torch::Tensor& hsv) {
  const torch::Tensor h = hsv[0], s = hsv[1], v = hsv[2];
  const torch::Tensor i = torch::floor(h * 6.0);
  const torch::Tensor f = h * 6.0 - i;
  const torch::Tensor sector = i.to(torch::kLong).remainder(6);
  const torch::Tensor p = (v * (1.0 - s)).clamp(0.0, 1.0);
  const torch::Tensor q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
  const torch::Tensor t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0);
  const torch::Tensor mask =
      (sector.unsqueeze(0) == torch::arange(6, sector.options()).view({-1, 1, 1}))
          .to(hsv.scalar_type());  // [6, H, W]
  const torch::Tensor a1 = torch::stack({v, q, p, p, t, v});
  const torch::Tensor a2 = torch::stack({t, v, v, q, p, p});
  const torch::Tensor a3 = torch::stack({p, p, t, v, v, q});
  return torch::stack({(mask * a1).sum(0), (mask * a2).sum(0), (mask * a3).sum(0)});
}

void ApplyColourAugmentation(torch::Tensor& images, const std::vector<int64_t>& ids,
                             const AugmentOptions& options, int round, int epoch,
                             const std::vector<float>& mean, const std::vector<float>& stddev) {
  if (!ColourAugmentationOn(options) || images.size(0) == 0) return;
  torch::NoGradGuard no_grad;
  const int64_t channels = images.size(1);
  const bool colour = channels == 3;
  const torch::Tensor m = torch::tensor(mean, images.options()).view({-1, 1, 1});
  const torch::Tensor sd = torch::tensor(stddev, images.options()).view({-1, 1, 1});
  for (int64_t i = 0; i < images.size(0); ++i) {
    const ColourDraw d = DrawColour(options, round, epoch, ids[static_cast<size_t>(i)]);
    if (!d.jitter && !(d.grayscale && colour)) continue;
    torch::Tensor x = (images[i] * sd + m).clamp(0.0, 1.0);
    if (d.jitter) {
      for (int op : d.order) {
        if (op == 0 && d.brightness != 1.0) {
          x = Blend(x, torch::zeros_like(x), d.brightness);
        } else if (op == 1 && d.contrast != 1.0) {
          const torch::Tensor grey = colour ? Grayscale(x) : x;
          x = Blend(x, grey.mean().expand_as(x), d.contrast);
        } else if (op == 2 && colour && d.saturation != 1.0) {
          x = Blend(x, Grayscale(x).expand_as(x), d.saturation);
        } else if (op == 3 && colour && d.hue != 0.0) {
          torch::Tensor hsv = RgbToHsv(x);
          hsv[0] = torch::fmod(hsv[0] + d.hue + 1.0, 1.0);
          x = HsvToRgb(hsv);
        }
      }
    }
    if (d.grayscale && colour) x = Grayscale(x).expand({3, -1, -1});
    images[i].copy_((x - m) / sd);
  }
}

}  // namespace mlcd::worker
