// Decoding encoded images (JPEG, PNG, WebP) into 8-bit pixels, without torch.
//
// The format is sniffed from the first bytes (never the file name): JPEG through TurboJPEG
// (libjpeg-turbo), PNG through libpng, WebP through libwebp. The output is always 8 bits per
// channel, HWC, with 1 (gray) or 3 (RGB) channels as the caller asks:
//   - gray sources are replicated to RGB; colour sources become gray by ITU-R 601 luma
//     (0.299 R + 0.587 G + 0.114 B, PIL's convert("L") and the JPEG Y channel);
//   - alpha is dropped (PIL's convert("RGB")), palettes are expanded, 16-bit PNG samples are
//     scaled to 8 bits with rounding, CMYK JPEGs (Adobe, inverted) become RGB.
// A JPEG can be decoded at a reduced size in the DCT domain (1/2, 1/4, 1/8): DecodeOptions
// names the least scale the caller needs and the decoder picks the smallest factor that is
// still at least that (ReadImageHeader gives the full size first, so a caller can work out
// which scale its crop needs before decoding).
//
// Bad input never crashes or exits (libjpeg and libpng errors are caught): an empty buffer,
// a truncated or corrupt image is DATA_LOSS; an unknown format (the message names its first
// bytes), an unsupported variant (animated WebP, 12-bit JPEG) or an image above
// kMaxImagePixels is INVALID_ARGUMENT. Every function here is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

// The most pixels (width x height) an image may have before it is decoded: a guard against
// decompression bombs (PIL refuses above ~179 M; 100 M is a 10000 x 10000 photo).
constexpr int64_t kMaxImagePixels = 100'000'000;

enum class ImageFormat { kJpeg, kPng, kWebp };

// "jpeg", "png", "webp".
const char* ImageFormatName(ImageFormat format);

// The format from the magic bytes: JPEG FF D8 FF, PNG 89 'PNG' 0D 0A 1A 0A, WebP 'RIFF' ....
// 'WEBP'. DATA_LOSS for an empty buffer; INVALID_ARGUMENT naming the format when it is a known
// one we do not decode (GIF, BMP, TIFF, ISO-BMFF such as AVIF/HEIC) or the first bytes in hex.
StatusOr<ImageFormat> SniffImageFormat(const uint8_t* data, size_t size);

// What the header says, read without decoding pixels.
struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int height = 0;
  int width = 0;
  // 1 for a gray source (gray, gray + alpha, gray JPEG), 3 for a colour one.
  int channels = 3;
};

// Errors as SniffImageFormat, DATA_LOSS when the header itself is cut off or corrupt, and
// INVALID_ARGUMENT above kMaxImagePixels.
StatusOr<ImageHeader> ReadImageHeader(const uint8_t* data, size_t size);

// An 8-bit image, rows top to bottom, pixels HWC. A partly decoded JPEG (DecodeOptions::region)
// is a window of the whole decoded image: its pixel (0, 0) is pixel (origin_y, origin_x) of a
// decoded_height x decoded_width image; otherwise origin is 0 and decoded_* equal height, width.
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;             // 1 or 3
  std::vector<uint8_t> pixels;  // height * width * channels
  int origin_y = 0, origin_x = 0;
  int decoded_height = 0, decoded_width = 0;
};

// Rows [top, top + height) and columns [left, left + width) of an image.
struct PixelRect {
  int top = 0, left = 0, height = 0, width = 0;
};

struct DecodeOptions {
  // Channels of the output: 3 = RGB, 1 = gray.
  int channels = 3;
  // JPEG only: the least scale (decoded / full size, in (0, 1]) the caller can use. The
  // decoder takes the smallest of 1/8, 1/4, 1/2, 1 that is >= this (each side rounds up, as
  // TurboJPEG's TJSCALED). 1 = full size. Other formats always decode at full size.
  double min_scale = 1.0;
  // JPEG only, when not empty: the caller needs only this rectangle (full-size pixels). The
  // decoder may then return just the rows and iMCU columns covering it (at the chosen scale),
  // skipping the inverse DCT above it and everything below it (jpeg_region_decode.h); a file
  // without its end-of-image marker is decoded whole, so truncation is always reported.
  PixelRect region;
};

// Decodes a whole image. The result's height / width are those of the decoded image (the
// scaled ones for a scaled JPEG). INVALID_ARGUMENT for options out of range.
StatusOr<Image> DecodeImage(const uint8_t* data, size_t size, const DecodeOptions& options = {});

inline StatusOr<Image> DecodeImage(const std::string& bytes, const DecodeOptions& options = {}) {
  return DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options);
}

// The denominator (1, 2, 4 or 8) the JPEG decoder uses for `min_scale` (exposed for tests and
// the transform, which maps its crop window into the decoded image's coordinates).
int JpegScaleDenominator(double min_scale);

// TurboJPEG's scaled size: ceil(size / denominator).
inline int ScaledSize(int size, int denominator) { return (size + denominator - 1) / denominator; }

// The bytes of the 8-bit pixels DecodeImage makes for an image with this header: width x
// height (a JPEG's at the scale `options` gives) x the larger of the source's and the output's
// channels (a gray source decoded to RGB is expanded first). What a decode memory budget
// reserves (worker/data/decode_budget.h) before decoding.
uint64_t DecodedImageBytes(const ImageHeader& header, const DecodeOptions& options);

}  // namespace mlcd::worker
