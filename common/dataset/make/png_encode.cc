#include "common/dataset/make/png_encode.h"

#include <png.h>

#include <csetjmp>
#include <vector>

namespace mlcd {
namespace {

void AppendBytes(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), length);
}

void Flush(png_structp) {}

}  // namespace

StatusOr<std::string> EncodePng(const uint8_t* pixels, int height, int width, int channels) {
  if (height < 1 || width < 1 || (channels != 1 && channels != 3)) {
    return Status::InvalidArgument("cannot encode a " + std::to_string(height) + "x" +
                                   std::to_string(width) + "x" + std::to_string(channels) +
                                   " image as PNG (grey or RGB, at least 1x1)");
  }
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return Status::Internal("libpng: cannot create a write structure");
  }
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  const size_t row_bytes = static_cast<size_t>(width) * channels;
  for (int y = 0; y < height; ++y) {
    rows[static_cast<size_t>(y)] = const_cast<png_bytep>(pixels + row_bytes * y);
  }
  // libpng reports errors by longjmp: nothing with a destructor is created below this point.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return Status::Internal("libpng failed to encode a " + std::to_string(height) + "x" +
                            std::to_string(width) + " image");
  }
  png_set_write_fn(png, &out, AppendBytes, Flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_filter(png, 0, PNG_FILTER_NONE);
  png_set_rows(png, info, rows.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace mlcd
