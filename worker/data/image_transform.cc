#include "worker/data/image_transform.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/random.h"
#include "common/stopwatch.h"

namespace mlcd::worker {
namespace {

using Clock = std::chrono::steady_clock;

// The augmentation stream of one sample: SplitMix64 seeded by a hash of (seed, tag, round,
// epoch, id, and the view when > 0), so draws never depend on which thread or batch handles the sample.
SplitMix SampleStream(uint64_t seed, const SampleKey& key) {
  uint64_t h = seed;
  for (uint64_t v : {uint64_t{0x52524332} /* "RRC2" */, static_cast<uint64_t>(key.round),
                     static_cast<uint64_t>(key.epoch), static_cast<uint64_t>(key.id)})
    h = Mix64(h ^ Mix64(v + 0x9E3779B97F4A7C15ull));
  if (key.view > 0) h = Mix64(h ^ Mix64(static_cast<uint64_t>(key.view) + 0x9E3779B97F4A7C15ull));
  return SplitMix(h);
}

// Uniform in [lo, hi).
double UniformIn(SplitMix& rng, double lo, double hi) {
  return lo + (hi - lo) * (1.0 - rng.Uniform());
}

// One output axis of the resampling: for output index i, taps [start[i], start[i] + count[i])
// of the source with weights[i * max_taps + k] (normalised). PIL's precompute_coeffs with the
// bilinear (triangle) filter.
struct AxisFilter {
  int max_taps = 0;
  std::vector<int> start, count;
  std::vector<float> weights;
};

AxisFilter MakeAxisFilter(double box_start, double box_size, int clip_lo, int clip_hi,
                          int out_size) {
  AxisFilter f;
  const double scale = box_size / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;
  f.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  f.start.resize(out_size);
  f.count.resize(out_size);
  f.weights.assign(static_cast<size_t>(out_size) * f.max_taps, 0.f);
  const int in_size = clip_hi - clip_lo;
  std::vector<double> w(f.max_taps);
  for (int i = 0; i < out_size; ++i) {
    const double center = (box_start - clip_lo) + (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = std::max(0, std::min(hi - lo, f.max_taps));
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const double x = std::abs((k + lo - center + 0.5) / filter_scale);
      w[k] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[k];
    }
    f.start[i] = clip_lo + lo;
    f.count[i] = n;
    for (int k = 0; k < n; ++k)
      f.weights[static_cast<size_t>(i) * f.max_taps + k] =
          static_cast<float>(total != 0 ? w[k] / total : 0);
  }
  return f;
}

// One output row of the horizontal pass from the vertically filtered source row `acc`
// (interleaved, starting at column col_lo): normalised, into the C planes, flipped if asked.
template <int C>
void HorizontalRow(const float* acc, int col_lo, const AxisFilter& fx, bool flip,
                   const float* scale, const float* shift, float* const* dst) {
  const int size = static_cast<int>(fx.start.size());
  for (int x = 0; x < size; ++x) {
    const float* src = acc + static_cast<size_t>(fx.start[x] - col_lo) * C;
    const float* wx = fx.weights.data() + static_cast<size_t>(x) * fx.max_taps;
    float sum[C] = {};
    for (int k = 0; k < fx.count[x]; ++k)
      for (int c = 0; c < C; ++c) sum[c] += wx[k] * src[k * C + c];
    const int ox = flip ? size - 1 - x : x;
    for (int c = 0; c < C; ++c) dst[c][ox] = sum[c] * scale[c] + shift[c];
  }
}

// RGB: one 4-float vector a tap (R, G, B and the next pixel's R, ignored), with GCC / Clang
// vector extensions (SSE, NEON) instead of three scalar chains.
template <>
void HorizontalRow<3>(const float* acc, int col_lo, const AxisFilter& fx, bool flip,
                      const float* scale, const float* shift, float* const* dst) {
  typedef float v4 __attribute__((vector_size(16)));
  const int size = static_cast<int>(fx.start.size());
  for (int x = 0; x < size; ++x) {
    const float* src = acc + static_cast<size_t>(fx.start[x] - col_lo) * 3;
    const float* wx = fx.weights.data() + static_cast<size_t>(x) * fx.max_taps;
    v4 sum = {0, 0, 0, 0};
    for (int k = 0; k < fx.count[x]; ++k) {
      v4 pixel;
      std::memcpy(&pixel, src + 3 * k, sizeof(pixel));
      sum += wx[k] * pixel;
    }
    const int ox = flip ? size - 1 - x : x;
    for (int c = 0; c < 3; ++c) dst[c][ox] = sum[c] * scale[c] + shift[c];
  }
}

// Vertical pass first (contiguous, vectorised: each output row is a weighted sum of whole
// source rows over the columns the horizontal filter reads), then the horizontal pass on S
// rows only, writing normalised CHW with the flip applied.
template <int C>
void ResampleImpl(const Image& image, const ResampleRegion& r, int size, const float* scale,
                  const float* shift, float* out) {
  const AxisFilter fx = MakeAxisFilter(r.left, r.width, r.clip_left, r.clip_right, size);
  const AxisFilter fy = MakeAxisFilter(r.top, r.height, r.clip_top, r.clip_bottom, size);
  int col_lo = image.width, col_hi = 0;
  for (int x = 0; x < size; ++x) {
    if (fx.count[x] == 0) continue;
    col_lo = std::min(col_lo, fx.start[x]);
    col_hi = std::max(col_hi, fx.start[x] + fx.count[x]);
  }
  col_hi = std::max(col_hi, col_lo);
  const size_t row_floats = static_cast<size_t>(col_hi - col_lo) * C;
  std::vector<float> tmp(row_floats + 1);  // + 1: HorizontalRow<3> loads 4 floats a pixel
  const size_t plane = static_cast<size_t>(size) * size;
  for (int y = 0; y < size; ++y) {
    float* acc = tmp.data();
    std::fill(acc, acc + row_floats, 0.f);
    const float* wy = fy.weights.data() + static_cast<size_t>(y) * fy.max_taps;
    for (int k = 0; k < fy.count[y]; ++k) {
      const uint8_t* src =
          image.pixels.data() + (static_cast<size_t>(fy.start[y] + k) * image.width + col_lo) * C;
      const float wk = wy[k];
      for (size_t i = 0; i < row_floats; ++i) acc[i] += wk * static_cast<float>(src[i]);
    }
    float* dst[C];
    for (int c = 0; c < C; ++c) dst[c] = out + c * plane + static_cast<size_t>(y) * size;
    HorizontalRow<C>(acc, col_lo, fx, r.flip, scale, shift, dst);
  }
}

std::vector<float> Defaulted(const std::vector<float>& given, const float* clip, int channels) {
  if (!given.empty()) return given;
  if (channels == 3) return {clip[0], clip[1], clip[2]};
  return {(clip[0] + clip[1] + clip[2]) / 3.0f};
}

}  // namespace

Status ValidateTransformParams(const TransformParams& p) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("transform: " + m); };
  if (p.image_size < 1 || p.image_size > kMaxTransformImageSize)
    return bad("image_size is " + std::to_string(p.image_size) + "; it must be in [1, " +
               std::to_string(kMaxTransformImageSize) + "]");
  if (p.channels != 1 && p.channels != 3)
    return bad("channels is " + std::to_string(p.channels) + "; use 1 (gray) or 3 (RGB)");
  if (p.resize_size != 0 &&
      (p.resize_size < p.image_size || p.resize_size > 4 * kMaxTransformImageSize))
    return bad("resize_size is " + std::to_string(p.resize_size) + "; it must be 0 (image_size * " +
               "256 / 224) or in [image_size (" + std::to_string(p.image_size) + "), " +
               std::to_string(4 * kMaxTransformImageSize) + "]");
  if (!(p.min_scale > 0 && p.min_scale <= p.max_scale && p.max_scale <= 1))
    return bad("crop scale [" + std::to_string(p.min_scale) + ", " + std::to_string(p.max_scale) +
               "] must satisfy 0 < min <= max <= 1");
  if (!(p.min_ratio > 0 && p.min_ratio <= p.max_ratio && std::isfinite(p.max_ratio)))
    return bad("crop ratio [" + std::to_string(p.min_ratio) + ", " + std::to_string(p.max_ratio) +
               "] must satisfy 0 < min <= max");
  if (!(p.flip_probability >= 0 && p.flip_probability <= 1))
    return bad("flip_probability is " + std::to_string(p.flip_probability) +
               "; it must be in [0, 1]");
  for (const auto* v : {&p.mean, &p.stddev})
    if (!v->empty() && static_cast<int>(v->size()) != p.channels)
      return bad(std::string(v == &p.mean ? "mean" : "stddev") + " has " +
                 std::to_string(v->size()) + " values for " + std::to_string(p.channels) +
                 " channels; give one per channel or none for CLIP's");
  for (float s : p.stddev)
    if (!(s > 0)) return bad("stddev values must be > 0");
  return Status::Ok();
}

int EffectiveResizeSize(const TransformParams& p) {
  return p.resize_size > 0 ? p.resize_size : p.image_size * 256 / 224;
}

std::vector<float> EffectiveMean(const TransformParams& p) {
  return Defaulted(p.mean, kClipMean, p.channels);
}

std::vector<float> EffectiveStd(const TransformParams& p) {
  return Defaulted(p.stddev, kClipStd, p.channels);
}

CropWindow DrawTrainCrop(const TransformParams& p, int height, int width, const SampleKey& key) {
  SplitMix rng = SampleStream(p.seed, key);
  CropWindow c;
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(p.min_ratio), log_hi = std::log(p.max_ratio);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area = area * UniformIn(rng, p.min_scale, p.max_scale);
    const double ratio = std::exp(UniformIn(rng, log_lo, log_hi));
    // Python's round(): half to even, as std::nearbyint in the default rounding mode.
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * ratio)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      c.top = static_cast<int>(rng.Below(static_cast<uint64_t>(height - h + 1)));
      c.left = static_cast<int>(rng.Below(static_cast<uint64_t>(width - w + 1)));
      c.height = h;
      c.width = w;
      found = true;
    }
  }
  if (!found) {  // the centre crop, clamped to the ratio bounds
    const double in_ratio = static_cast<double>(width) / height;
    c.width = width;
    c.height = height;
    if (in_ratio < p.min_ratio) {
      c.height = static_cast<int>(std::nearbyint(width / p.min_ratio));
    } else if (in_ratio > p.max_ratio) {
      c.width = static_cast<int>(std::nearbyint(height * p.max_ratio));
    }
    c.height = std::clamp(c.height, 1, height);
    c.width = std::clamp(c.width, 1, width);
    c.top = (height - c.height) / 2;
    c.left = (width - c.width) / 2;
  }
  c.flip = p.flip_probability > 0 && rng.Uniform() <= p.flip_probability;
  return c;
}

ResampleRegion TrainRegion(const CropWindow& crop) {
  ResampleRegion r;
  r.top = crop.top;
  r.left = crop.left;
  r.height = crop.height;
  r.width = crop.width;
  r.clip_top = crop.top;
  r.clip_left = crop.left;
  r.clip_bottom = crop.top + crop.height;
  r.clip_right = crop.left + crop.width;
  r.flip = crop.flip;
  return r;
}

ResampleRegion EvalRegion(const TransformParams& p, int height, int width) {
  const int resize = EffectiveResizeSize(p);
  // torchvision: the shorter side becomes `resize`, the longer int(resize * long / short)
  // (capped so that a 1-pixel-high strip cannot overflow an int).
  int new_h = resize, new_w = resize;
  if (height <= width) {
    new_w = static_cast<int>(std::min(1e9, static_cast<double>(resize) * width / height));
  } else {
    new_h = static_cast<int>(std::min(1e9, static_cast<double>(resize) * height / width));
  }
  const int s = p.image_size;
  // CenterCrop: int(round((new - s) / 2)), Python rounding.
  const int top = static_cast<int>(std::nearbyint((new_h - s) / 2.0));
  const int left = static_cast<int>(std::nearbyint((new_w - s) / 2.0));
  const double sy = static_cast<double>(height) / new_h, sx = static_cast<double>(width) / new_w;
  ResampleRegion r;
  r.top = top * sy;
  r.left = left * sx;
  r.height = s * sy;
  r.width = s * sx;
  r.clip_bottom = height;
  r.clip_right = width;
  return r;
}

ResampleRegion ScaleRegion(const ResampleRegion& region, int height, int width, int decoded_height,
                           int decoded_width) {
  const double sy = static_cast<double>(decoded_height) / height;
  const double sx = static_cast<double>(decoded_width) / width;
  ResampleRegion r = region;
  r.top = region.top * sy;
  r.height = region.height * sy;
  r.left = region.left * sx;
  r.width = region.width * sx;
  r.clip_top = static_cast<int>(std::floor(region.clip_top * sy));
  r.clip_left = static_cast<int>(std::floor(region.clip_left * sx));
  r.clip_bottom = std::min(decoded_height, static_cast<int>(std::ceil(region.clip_bottom * sy)));
  r.clip_right = std::min(decoded_width, static_cast<int>(std::ceil(region.clip_right * sx)));
  return r;
}

void ResampleNormalize(const Image& image, const ResampleRegion& region,
                       const TransformParams& params, float* out) {
  const std::vector<float> mean = EffectiveMean(params), stddev = EffectiveStd(params);
  float scale[3], shift[3];
  for (int c = 0; c < params.channels; ++c) {
    scale[c] = 1.0f / (255.0f * stddev[c]);
    shift[c] = -mean[c] / stddev[c];
  }
  if (params.channels == 1) {
    ResampleImpl<1>(image, region, params.image_size, scale, shift, out);
  } else {
    ResampleImpl<3>(image, region, params.image_size, scale, shift, out);
  }
}

namespace {

// The source pixels the filter of `r` can read, in full-size pixels: the region widened by
// the filter's support (plus rounding slack) at decode scale 1/denominator, within its clip.
PixelRect NeededRect(const ResampleRegion& r, int denominator, int size) {
  const double support = std::max(std::max(r.height, r.width) / denominator / size, 1.0) + 2;
  const double margin = support * denominator;
  const int top = std::max(r.clip_top, static_cast<int>(std::floor(r.top - margin)));
  const int left = std::max(r.clip_left, static_cast<int>(std::floor(r.left - margin)));
  const int bottom =
      std::min(r.clip_bottom, static_cast<int>(std::ceil(r.top + r.height + margin)));
  const int right = std::min(r.clip_right, static_cast<int>(std::ceil(r.left + r.width + margin)));
  return PixelRect{top, left, std::max(0, bottom - top), std::max(0, right - left)};
}

// `r` (in pixels of the whole decoded image) in the coordinates of `image`, a window of it.
ResampleRegion IntoWindow(ResampleRegion r, const Image& image) {
  r.top -= image.origin_y;
  r.left -= image.origin_x;
  r.clip_top = std::max(0, r.clip_top - image.origin_y);
  r.clip_left = std::max(0, r.clip_left - image.origin_x);
  r.clip_bottom = std::min(image.height, r.clip_bottom - image.origin_y);
  r.clip_right = std::min(image.width, r.clip_right - image.origin_x);
  return r;
}

// "a 9990 x 9990 gray PNG" for messages.
std::string DescribeImage(const ImageHeader& header) {
  return std::string("a ") + std::to_string(header.width) + " x " + std::to_string(header.height) +
         (header.channels == 1 ? " gray " : " colour ") + ImageFormatName(header.format);
}

}  // namespace

StatusOr<TransformTimings> DecodeAndTransform(const uint8_t* data, size_t size,
                                              const TransformParams& params, TransformMode mode,
                                              const SampleKey& key, float* out,
                                              DecodeMemoryBudget* budget) {
  TransformTimings t;
  const auto start = Clock::now();
  MLCD_ASSIGN_OR_RETURN(ImageHeader header, ReadImageHeader(data, size));
  const ResampleRegion region =
      mode == TransformMode::kTrain
          ? TrainRegion(DrawTrainCrop(params, header.height, header.width, key))
          : EvalRegion(params, header.height, header.width);
  DecodeOptions decode;
  decode.channels = params.channels;
  if (params.dct_scaling)
    decode.min_scale = std::min(
        1.0, std::max(params.image_size / region.height, params.image_size / region.width));
  if (params.region_decode)
    decode.region = NeededRect(region, JpegScaleDenominator(decode.min_scale), params.image_size);
  DecodeMemoryBudget::Reservation reservation;
  if (budget) {
    MLCD_ASSIGN_OR_RETURN(
        reservation, budget->Reserve(DecodedImageBytes(header, decode), DescribeImage(header)));
  }
  MLCD_ASSIGN_OR_RETURN(Image image, DecodeImage(data, size, decode));
  t.decode_seconds = SecondsSince(start);
  const auto transform_start = Clock::now();
  const bool scaled = image.decoded_height != header.height || image.decoded_width != header.width;
  if (scaled) t.decode_denominator = JpegScaleDenominator(decode.min_scale);
  const ResampleRegion in_decoded = scaled ? ScaleRegion(region, header.height, header.width,
                                                         image.decoded_height, image.decoded_width)
                                           : region;
  ResampleNormalize(image, IntoWindow(in_decoded, image), params, out);
  t.transform_seconds = SecondsSince(transform_start);
  return t;
}

}  // namespace mlcd::worker
