// Real encoded images for the tests of worker/data/: a deterministic pattern with smooth
// gradients and edges (it compresses like a photo), encoded by the real libraries (libpng,
// TurboJPEG, libwebp) at test time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/data/image_decode.h"

namespace mlcd::worker::testing {

// height x width x channels (1 or 3): gradients, a few discs and mild noise from `seed`.
Image TestPattern(int height, int width, int channels, uint64_t seed);

// 4:4:4 unless `subsampling_420`; gray images as gray JPEGs; baseline or progressive.
std::string EncodeJpeg(const Image& image, int quality, bool subsampling_420 = false,
                       bool progressive = false);

// A PNG of `color_type` (PNG_COLOR_TYPE_*) and `bit_depth` from raw PNG rows: `samples`
// holds height * width * channels values (16-bit: the full range), row-major; `palette` is
// RGB triples for PNG_COLOR_TYPE_PALETTE. Interlaced (Adam7) when asked.
std::string EncodePng(int height, int width, int color_type, int bit_depth,
                      const std::vector<uint16_t>& samples,
                      const std::vector<uint8_t>& palette = {}, bool interlaced = false);
// An 8-bit gray or RGB PNG of `image`.
std::string EncodePng(const Image& image);

// An 8-bit gray (channels 1) or RGB PNG of zeros, written row by row: a decompression bomb
// (9990 x 9990 gray is ~100 KB and decodes to ~100 MB) made without holding its pixels.
std::string EncodeZeroPng(int height, int width, int channels);

// RGB WebP (gray images are replicated), lossless or lossy at `quality`.
std::string EncodeWebp(const Image& image, bool lossless, float quality = 90);

// Mean and largest absolute difference of two images of the same shape.
struct PixelDiff {
  double mean = 0;
  int max = 0;
};
PixelDiff Compare(const Image& a, const Image& b);

}  // namespace mlcd::worker::testing
