#include "worker/data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include "worker/data/jpeg_region_decode.h"

namespace mlcd::worker {
namespace {

// ---------------------------------------------------------------------------------------------
// Shared helpers

std::string HexPrefix(const uint8_t* data, size_t size) {
  std::string hex, text;
  const size_t n = std::min<size_t>(size, 8);
  for (size_t i = 0; i < n; ++i) {
    char b[4];
    std::snprintf(b, sizeof(b), i ? " %02x" : "%02x", data[i]);
    hex += b;
    text += std::isprint(data[i]) ? static_cast<char>(data[i]) : '.';
  }
  return hex + " (\"" + text + "\")";
}

Status CheckPixels(int width, int height, const char* format) {
  if (width <= 0 || height <= 0)
    return Status::DataLoss(std::string("corrupt ") + format + ": the header gives a size of " +
                            std::to_string(width) + "x" + std::to_string(height));
  if (static_cast<int64_t>(width) * height > kMaxImagePixels)
    return Status::InvalidArgument(std::string(format) + " image of " + std::to_string(width) +
                                   "x" + std::to_string(height) + " pixels is above the limit of " +
                                   std::to_string(kMaxImagePixels) +
                                   " pixels; downscale it before training");
  return Status::Ok();
}

// ITU-R 601 luma in PIL's fixed point: (19595 R + 38470 G + 7471 B + 0x8000) >> 16.
void RgbToGray(const uint8_t* rgb, size_t pixels, uint8_t* gray) {
  for (size_t i = 0; i < pixels; ++i, rgb += 3)
    gray[i] =
        static_cast<uint8_t>((19595u * rgb[0] + 38470u * rgb[1] + 7471u * rgb[2] + 0x8000u) >> 16);
}

// An RGB image turned into the requested channels (gray by luma, in place of the buffer).
void ToChannels(Image* image, int channels) {
  if (image->channels == channels) return;
  const size_t n = static_cast<size_t>(image->height) * image->width;
  std::vector<uint8_t> out(n * channels);
  if (channels == 1) {
    RgbToGray(image->pixels.data(), n, out.data());
  } else {
    for (size_t i = 0; i < n; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = image->pixels[i];
  }
  image->pixels = std::move(out);
  image->channels = channels;
}

// ---------------------------------------------------------------------------------------------
// JPEG (TurboJPEG). One decompressor per thread: creating one allocates libjpeg's state.

// After an error libjpeg's state is left mid-stream (TurboJPEG's header reader does not abort
// it), so the next image would be read as a continuation: a failed handle is replaced.
struct TjHandle {
  tjhandle handle = tjInitDecompress();
  ~TjHandle() {
    if (handle) tjDestroy(handle);
  }
  void Reset() {
    if (handle) tjDestroy(handle);
    handle = tjInitDecompress();
  }
};

thread_local TjHandle thread_decompressor;

StatusOr<tjhandle> ThreadDecompressor() {
  if (!thread_decompressor.handle)
    return Status::Internal(std::string("tjInitDecompress: ") + tjGetErrorStr2(nullptr));
  return thread_decompressor.handle;
}

// The error of the thread's handle (then replaced).
Status JpegError(tjhandle handle, const char* what) {
  const std::string message = tjGetErrorStr2(handle);
  thread_decompressor.Reset();
  if (message.find("Premature end") != std::string::npos)
    return Status::DataLoss(std::string("truncated JPEG (") + what + ": " + message +
                            "); the file was cut off: download or copy it again");
  return Status::DataLoss(std::string("corrupt JPEG (") + what + ": " + message + ")");
}

struct JpegInfo {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

StatusOr<JpegInfo> ReadJpegInfo(tjhandle handle, const uint8_t* data, size_t size) {
  JpegInfo info;
  if (tjDecompressHeader3(handle, data, size, &info.width, &info.height, &info.subsampling,
                          &info.colorspace) != 0)
    return JpegError(handle, "header");
  MLCD_RETURN_IF_ERROR(CheckPixels(info.width, info.height, "JPEG"));
  return info;
}

// libjpeg returns Adobe CMYK inverted (255 = no ink): R = C * K / 255 and so on.
void CmykToRgb(const uint8_t* cmyk, size_t pixels, uint8_t* rgb) {
  for (size_t i = 0; i < pixels; ++i, cmyk += 4, rgb += 3) {
    const unsigned k = cmyk[3];
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>((cmyk[c] * k + 127) / 255);
  }
}

StatusOr<Image> DecodeJpeg(const uint8_t* data, size_t size, const DecodeOptions& options) {
  MLCD_ASSIGN_OR_RETURN(tjhandle handle, ThreadDecompressor());
  MLCD_ASSIGN_OR_RETURN(JpegInfo info, ReadJpegInfo(handle, data, size));
  const int denominator = JpegScaleDenominator(options.min_scale);
  Image image;
  image.width = ScaledSize(info.width, denominator);
  image.height = ScaledSize(info.height, denominator);
  const bool cmyk = info.colorspace == TJCS_CMYK || info.colorspace == TJCS_YCCK;
  const int pixel_format = cmyk ? TJPF_CMYK : options.channels == 1 ? TJPF_GRAY : TJPF_RGB;
  const int decoded_channels = cmyk ? 4 : options.channels;
  std::vector<uint8_t> pixels(static_cast<size_t>(image.width) * image.height * decoded_channels);
  if (tjDecompress2(handle, data, size, pixels.data(), image.width, 0, image.height, pixel_format,
                    0) != 0) {
    // Warnings (e.g. extraneous bytes) still give a whole image; a premature end does not.
    if (tjGetErrorCode(handle) == TJERR_FATAL ||
        std::strstr(tjGetErrorStr2(handle), "Premature end") != nullptr)
      return JpegError(handle, "decode");
    thread_decompressor.Reset();
  }
  if (cmyk) {
    image.channels = 3;
    image.pixels.resize(static_cast<size_t>(image.width) * image.height * 3);
    CmykToRgb(pixels.data(), static_cast<size_t>(image.width) * image.height, image.pixels.data());
    ToChannels(&image, options.channels);
  } else {
    image.channels = options.channels;
    image.pixels = std::move(pixels);
  }
  return image;
}

// ---------------------------------------------------------------------------------------------
// PNG (libpng). libpng reports errors by longjmp: the functions that call it hold no C++
// objects with destructors, and the caller owns every buffer.

struct PngContext {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  bool truncated = false;
  char error[256] = {0};
  png_structp png = nullptr;
  png_infop info = nullptr;
};

void PngErrorFn(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->error, sizeof(ctx->error), "%s", message);
  png_longjmp(png, 1);
}

void PngWarningFn(png_structp, png_const_charp) {}

void PngReadFn(png_structp png, png_bytep out, png_size_t length) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (length > ctx->size - ctx->pos) {
    ctx->truncated = true;
    png_error(png, "unexpected end of data");
  }
  std::memcpy(out, ctx->data + ctx->pos, length);
  ctx->pos += length;
}

struct PngLayout {
  int width = 0, height = 0;
  int source_channels = 3;   // 1 gray, 3 colour
  int decoded_channels = 3;  // after libpng's transforms
};

// Reads the header and sets the transforms to 8-bit gray or RGB without alpha. False on a
// libpng error (message in ctx->error).
bool PngReadHeader(PngContext* ctx, int out_channels, PngLayout* layout) {
  if (setjmp(png_jmpbuf(ctx->png))) return false;
  png_set_read_fn(ctx->png, ctx, PngReadFn);
  png_read_info(ctx->png, ctx->info);
  layout->width = static_cast<int>(png_get_image_width(ctx->png, ctx->info));
  layout->height = static_cast<int>(png_get_image_height(ctx->png, ctx->info));
  const int color_type = png_get_color_type(ctx->png, ctx->info);
  const int bit_depth = png_get_bit_depth(ctx->png, ctx->info);
  const bool gray = (color_type & PNG_COLOR_MASK_COLOR) == 0;
  layout->source_channels = gray ? 1 : 3;
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(ctx->png);
  if (gray && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(ctx->png);
  if (bit_depth == 16) png_set_scale_16(ctx->png);
  if (color_type & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(ctx->png);
  if (gray && out_channels == 3) png_set_gray_to_rgb(ctx->png);
  png_set_interlace_handling(ctx->png);
  png_read_update_info(ctx->png, ctx->info);
  layout->decoded_channels = png_get_channels(ctx->png, ctx->info);
  return true;
}

bool PngReadRows(PngContext* ctx, png_bytepp rows) {
  if (setjmp(png_jmpbuf(ctx->png))) return false;
  png_read_image(ctx->png, rows);
  return true;
}

Status PngError(const PngContext& ctx, const char* what) {
  if (ctx.truncated)
    return Status::DataLoss(std::string("truncated PNG: the data ends inside the ") + what +
                            "; the file was cut off: download or copy it again");
  return Status::DataLoss(std::string("corrupt PNG (") + what + ": " + ctx.error + ")");
}

struct PngReadStruct {
  PngContext ctx;
  ~PngReadStruct() {
    if (ctx.png) png_destroy_read_struct(&ctx.png, ctx.info ? &ctx.info : nullptr, nullptr);
  }
};

StatusOr<Image> DecodePngImpl(const uint8_t* data, size_t size, int out_channels, PngLayout* layout,
                              bool header_only) {
  PngReadStruct s;
  s.ctx.data = data;
  s.ctx.size = size;
  s.ctx.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s.ctx, PngErrorFn, PngWarningFn);
  if (!s.ctx.png) return Status::ResourceExhausted("png_create_read_struct failed");
  s.ctx.info = png_create_info_struct(s.ctx.png);
  if (!s.ctx.info) return Status::ResourceExhausted("png_create_info_struct failed");
  if (!PngReadHeader(&s.ctx, out_channels, layout)) return PngError(s.ctx, "header");
  MLCD_RETURN_IF_ERROR(CheckPixels(layout->width, layout->height, "PNG"));
  Image image;
  if (header_only) return image;
  image.width = layout->width;
  image.height = layout->height;
  image.channels = layout->decoded_channels;
  if (image.channels != 1 && image.channels != 3)
    return Status::Internal("libpng gave " + std::to_string(image.channels) + " channels");
  const size_t row_bytes = static_cast<size_t>(image.width) * image.channels;
  if (png_get_rowbytes(s.ctx.png, s.ctx.info) != row_bytes)
    return Status::Internal("libpng row size differs from width x channels");
  image.pixels.resize(row_bytes * image.height);
  std::vector<png_bytep> rows(image.height);
  for (int y = 0; y < image.height; ++y) rows[y] = image.pixels.data() + row_bytes * y;
  if (!PngReadRows(&s.ctx, rows.data())) return PngError(s.ctx, "pixel data");
  ToChannels(&image, out_channels);
  return image;
}

// ---------------------------------------------------------------------------------------------
// WebP (libwebp)

Status WebpError(VP8StatusCode code, const char* what) {
  switch (code) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return Status::DataLoss(std::string("truncated WebP: the data ends inside the ") + what +
                              "; the file was cut off: download or copy it again");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return Status::InvalidArgument(std::string("WebP uses a feature libwebp cannot decode (") +
                                     what + ")");
    default:
      return Status::DataLoss(std::string("corrupt WebP (") + what + ": VP8 status " +
                              std::to_string(static_cast<int>(code)) + ")");
  }
}

StatusOr<WebPBitstreamFeatures> ReadWebpFeatures(const uint8_t* data, size_t size) {
  WebPBitstreamFeatures features;
  const VP8StatusCode code = WebPGetFeatures(data, size, &features);
  if (code != VP8_STATUS_OK) return WebpError(code, "header");
  if (features.has_animation)
    return Status::InvalidArgument(
        "animated WebP is not supported: extract one frame (e.g. with webpmux -get frame 1)");
  MLCD_RETURN_IF_ERROR(CheckPixels(features.width, features.height, "WebP"));
  return features;
}

StatusOr<Image> DecodeWebp(const uint8_t* data, size_t size, int out_channels) {
  MLCD_ASSIGN_OR_RETURN(WebPBitstreamFeatures features, ReadWebpFeatures(data, size));
  Image image;
  image.width = features.width;
  image.height = features.height;
  image.channels = 3;
  image.pixels.resize(static_cast<size_t>(image.width) * image.height * 3);
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return Status::Internal("libwebp version mismatch");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = image.pixels.data();
  config.output.u.RGBA.stride = image.width * 3;
  config.output.u.RGBA.size = image.pixels.size();
  const VP8StatusCode code = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  if (code != VP8_STATUS_OK) return WebpError(code, "pixel data");
  ToChannels(&image, out_channels);
  return image;
}

// A region decode pays off when a region is given and the file is whole: it ends with the EOI
// marker (FF D9) within its last 64 bytes (trailing padding allowed). Without it the whole
// image is decoded, which reports the truncation.
bool WantsRegion(const PixelRect& region, const uint8_t* data, size_t size) {
  if (region.height <= 0 || region.width <= 0) return false;
  const size_t from = size > 64 ? size - 64 : 0;
  for (size_t i = size - 1; i > from; --i)
    if (data[i] == 0xD9 && data[i - 1] == 0xFF) return true;
  return false;
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kWebp:
      return "webp";
  }
  return "unknown";
}

StatusOr<ImageFormat> SniffImageFormat(const uint8_t* data, size_t size) {
  if (size == 0) return Status::DataLoss("the image is empty (0 bytes)");
  auto starts = [&](size_t offset, const char* magic, size_t n) {
    return size >= offset + n && std::memcmp(data + offset, magic, n) == 0;
  };
  if (starts(0, "\xFF\xD8\xFF", 3)) return ImageFormat::kJpeg;
  if (starts(0, "\x89PNG\r\n\x1A\n", 8)) return ImageFormat::kPng;
  if (starts(0, "RIFF", 4) && starts(8, "WEBP", 4)) return ImageFormat::kWebp;
  const char* known = nullptr;
  if (starts(0, "GIF8", 4)) known = "GIF";
  if (starts(0, "BM", 2)) known = "BMP";
  if (starts(0, "II*\0", 4) || starts(0, "MM\0*", 4)) known = "TIFF";
  if (starts(4, "ftyp", 4)) known = "ISO-BMFF (AVIF/HEIC)";
  if (starts(0, "\0\0\0\x0CjP  ", 8)) known = "JPEG 2000";
  const std::string head = HexPrefix(data, size);
  if (known)
    return Status::InvalidArgument(std::string("unsupported image format ") + known +
                                   " (starts with " + head + "); convert it to JPEG, PNG or WebP");
  if (size < 12 && (starts(0, "\xFF\xD8", 2) || starts(0, "\x89PN", 3) || starts(0, "RIFF", 4)))
    return Status::DataLoss("truncated image: only " + std::to_string(size) +
                            " bytes, starting with " + head);
  return Status::InvalidArgument("unsupported image format: the data starts with " + head +
                                 ", which is not JPEG (ff d8 ff), PNG (89 50 4e 47) or WebP "
                                 "(RIFF....WEBP)");
}

StatusOr<ImageHeader> ReadImageHeader(const uint8_t* data, size_t size) {
  MLCD_ASSIGN_OR_RETURN(ImageFormat format, SniffImageFormat(data, size));
  ImageHeader header;
  header.format = format;
  switch (format) {
    case ImageFormat::kJpeg: {
      MLCD_ASSIGN_OR_RETURN(tjhandle handle, ThreadDecompressor());
      MLCD_ASSIGN_OR_RETURN(JpegInfo info, ReadJpegInfo(handle, data, size));
      header.width = info.width;
      header.height = info.height;
      header.channels = info.colorspace == TJCS_GRAY ? 1 : 3;
      break;
    }
    case ImageFormat::kPng: {
      PngLayout layout;
      MLCD_RETURN_IF_ERROR(DecodePngImpl(data, size, 3, &layout, true).status());
      header.width = layout.width;
      header.height = layout.height;
      header.channels = layout.source_channels;
      break;
    }
    case ImageFormat::kWebp: {
      MLCD_ASSIGN_OR_RETURN(WebPBitstreamFeatures features, ReadWebpFeatures(data, size));
      header.width = features.width;
      header.height = features.height;
      header.channels = 3;
      break;
    }
  }
  return header;
}

int JpegScaleDenominator(double min_scale) {
  for (int denominator : {8, 4, 2})
    if (1.0 / denominator >= min_scale) return denominator;
  return 1;
}

uint64_t DecodedImageBytes(const ImageHeader& header, const DecodeOptions& options) {
  const int denominator =
      header.format == ImageFormat::kJpeg ? JpegScaleDenominator(options.min_scale) : 1;
  return static_cast<uint64_t>(ScaledSize(header.width, denominator)) *
         static_cast<uint64_t>(ScaledSize(header.height, denominator)) *
         static_cast<uint64_t>(std::max(header.channels, options.channels));
}

StatusOr<Image> DecodeImage(const uint8_t* data, size_t size, const DecodeOptions& options) {
  if (options.channels != 1 && options.channels != 3)
    return Status::InvalidArgument("DecodeOptions.channels is " + std::to_string(options.channels) +
                                   "; use 1 (gray) or 3 (RGB)");
  if (!(options.min_scale > 0 && options.min_scale <= 1))
    return Status::InvalidArgument("DecodeOptions.min_scale is " +
                                   std::to_string(options.min_scale) + "; it must be in (0, 1]");
  MLCD_ASSIGN_OR_RETURN(ImageFormat format, SniffImageFormat(data, size));
  switch (format) {
    case ImageFormat::kJpeg: {
      if (WantsRegion(options.region, data, size)) {
        StatusOr<Image> part = DecodeJpegRegion(data, size, JpegScaleDenominator(options.min_scale),
                                                options.channels, options.region);
        if (part.ok() || part.status().code() != StatusCode::kUnimplemented) return part;
      }
      MLCD_ASSIGN_OR_RETURN(Image image, DecodeJpeg(data, size, options));
      image.decoded_height = image.height;
      image.decoded_width = image.width;
      return image;
    }
    case ImageFormat::kPng: {
      PngLayout layout;
      MLCD_ASSIGN_OR_RETURN(Image image,
                            DecodePngImpl(data, size, options.channels, &layout, false));
      image.decoded_height = image.height;
      image.decoded_width = image.width;
      return image;
    }
    case ImageFormat::kWebp: {
      MLCD_ASSIGN_OR_RETURN(Image image, DecodeWebp(data, size, options.channels));
      image.decoded_height = image.height;
      image.decoded_width = image.width;
      return image;
    }
  }
  return Status::Internal("unhandled image format");
}

}  // namespace mlcd::worker
