#include "tests/worker_data/image_testing.h"

#include <png.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "common/random.h"

namespace mlcd::worker::testing {

Image TestPattern(int height, int width, int channels, uint64_t seed) {
  Image image;
  image.height = height;
  image.width = width;
  image.channels = channels;
  image.pixels.resize(static_cast<size_t>(height) * width * channels);
  SplitMix rng(seed);
  double cx[3], cy[3], radius[3];
  for (int d = 0; d < 3; ++d) {
    cx[d] = rng.Uniform() * width;
    cy[d] = rng.Uniform() * height;
    radius[d] = (0.1 + 0.2 * rng.Uniform()) * std::min(height, width);
  }
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        double v = 40 + 120.0 * x / width + 60.0 * y / height + 20 * c +
                   25 * std::sin(0.05 * (x + 2 * c) + 0.03 * y);
        for (int d = 0; d < 3; ++d)
          if (std::hypot(x - cx[d], y - cy[d]) < radius[d]) v += (d % 2 ? -50 : 50) + 15 * c;
        v += 6 * (rng.Uniform() - 0.5);
        image.pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return image;
}

std::string EncodeJpeg(const Image& image, int quality, bool subsampling_420, bool progressive) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const bool gray = image.channels == 1;
  const int subsampling = gray ? TJSAMP_GRAY : subsampling_420 ? TJSAMP_420 : TJSAMP_444;
  const int rc = tjCompress2(handle, image.pixels.data(), image.width, 0, image.height,
                             gray ? TJPF_GRAY : TJPF_RGB, &out, &size, subsampling, quality,
                             progressive ? TJFLAG_PROGRESSIVE : 0);
  if (rc != 0) throw std::runtime_error(std::string("tjCompress2: ") + tjGetErrorStr2(handle));
  std::string bytes(reinterpret_cast<const char*>(out), size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

namespace {

void PngWrite(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))
      ->append(reinterpret_cast<const char*>(data), length);
}
void PngFlush(png_structp) {}

int PngChannels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_PALETTE:
      return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB:
      return 3;
    default:
      return 4;
  }
}

// Packs samples into PNG row bytes (big-endian 16-bit; sub-byte depths MSB first).
std::vector<uint8_t> PackRows(int height, int width, int channels, int bit_depth,
                              const std::vector<uint16_t>& samples) {
  const size_t row_bytes = (static_cast<size_t>(width) * channels * bit_depth + 7) / 8;
  std::vector<uint8_t> rows(row_bytes * height, 0);
  for (int y = 0; y < height; ++y) {
    uint8_t* row = rows.data() + row_bytes * y;
    for (int i = 0; i < width * channels; ++i) {
      const uint16_t v = samples[static_cast<size_t>(y) * width * channels + i];
      if (bit_depth == 16) {
        row[2 * i] = static_cast<uint8_t>(v >> 8);
        row[2 * i + 1] = static_cast<uint8_t>(v);
      } else if (bit_depth == 8) {
        row[i] = static_cast<uint8_t>(v);
      } else {
        const int per_byte = 8 / bit_depth;
        const int shift = 8 - bit_depth * (i % per_byte + 1);
        row[i / per_byte] |= static_cast<uint8_t>(v << shift);
      }
    }
  }
  return rows;
}

}  // namespace

std::string EncodePng(int height, int width, int color_type, int bit_depth,
                      const std::vector<uint16_t>& samples, const std::vector<uint8_t>& palette,
                      bool interlaced) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) throw std::runtime_error("libpng write failed");
  png_set_write_fn(png, &out, PngWrite, PngFlush);
  png_set_IHDR(png, info, width, height, bit_depth, color_type,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> colors;
  for (size_t i = 0; i + 2 < palette.size(); i += 3)
    colors.push_back(png_color{palette[i], palette[i + 1], palette[i + 2]});
  if (!colors.empty()) png_set_PLTE(png, info, colors.data(), static_cast<int>(colors.size()));
  std::vector<uint8_t> rows = PackRows(height, width, PngChannels(color_type), bit_depth, samples);
  const size_t row_bytes = rows.size() / height;
  std::vector<png_bytep> pointers(height);
  for (int y = 0; y < height; ++y) pointers[y] = rows.data() + row_bytes * y;
  png_set_rows(png, info, pointers.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::string EncodePng(const Image& image) {
  std::vector<uint16_t> samples(image.pixels.begin(), image.pixels.end());
  return EncodePng(image.height, image.width,
                   image.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, 8, samples);
}

std::string EncodeZeroPng(int height, int width, int channels) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) throw std::runtime_error("libpng write failed");
  png_set_write_fn(png, &out, PngWrite, PngFlush);
  png_set_IHDR(png, info, width, height, 8, channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_filter(png, 0, PNG_FILTER_NONE);
  png_write_info(png, info);
  std::vector<uint8_t> row(static_cast<size_t>(width) * channels, 0);
  for (int y = 0; y < height; ++y) png_write_row(png, row.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::string EncodeWebp(const Image& image, bool lossless, float quality) {
  std::vector<uint8_t> rgb = image.pixels;
  if (image.channels == 1) {
    rgb.resize(image.pixels.size() * 3);
    for (size_t i = 0; i < image.pixels.size(); ++i)
      rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = image.pixels[i];
  }
  uint8_t* out = nullptr;
  const size_t size =
      lossless
          ? WebPEncodeLosslessRGB(rgb.data(), image.width, image.height, image.width * 3, &out)
          : WebPEncodeRGB(rgb.data(), image.width, image.height, image.width * 3, quality, &out);
  if (size == 0) throw std::runtime_error("WebPEncode failed");
  std::string bytes(reinterpret_cast<const char*>(out), size);
  WebPFree(out);
  return bytes;
}

PixelDiff Compare(const Image& a, const Image& b) {
  PixelDiff d;
  if (a.pixels.size() != b.pixels.size() || a.pixels.empty()) {
    d.mean = d.max = 1000;
    return d;
  }
  double total = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    const int diff = std::abs(static_cast<int>(a.pixels[i]) - static_cast<int>(b.pixels[i]));
    total += diff;
    d.max = std::max(d.max, diff);
  }
  d.mean = total / a.pixels.size();
  return d;
}

}  // namespace mlcd::worker::testing
