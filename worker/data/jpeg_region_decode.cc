#include "worker/data/jpeg_region_decode.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>

namespace mlcd::worker {
namespace {

// libjpeg reports errors by longjmp to `jump`; the functions that call it hold no C++ objects
// with destructors, and the caller owns every buffer.
struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool premature_end;
};

void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings are kept quiet; a premature end means the data was cut off.
void EmitMessage(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) err->premature_end = true;
}

constexpr int kCropSlack = 2;

struct Decoder {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  bool created = false;
  ~Decoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

struct Geometry {
  int full_height = 0, full_width = 0;           // the whole scaled image
  int top = 0, left = 0, height = 0, width = 0;  // the rows / columns decoded
  bool cmyk = false;
};

// Header, scale, start, column crop and the skip to the first row. False on a libjpeg error.
bool Start(Decoder* d, const uint8_t* data, size_t size, int denominator, int channels,
           const PixelRect* region, Geometry* g) {
  if (setjmp(d->err.jump)) return false;
  jpeg_mem_src(&d->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d->cinfo, TRUE);
  if (d->cinfo.jpeg_color_space == JCS_CMYK || d->cinfo.jpeg_color_space == JCS_YCCK) {
    g->cmyk = true;
    return true;
  }
  d->cinfo.scale_num = 1;
  d->cinfo.scale_denom = static_cast<unsigned>(denominator);
  d->cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&d->cinfo);
  g->full_height = static_cast<int>(d->cinfo.output_height);
  g->full_width = static_cast<int>(d->cinfo.output_width);
  const int y0 = std::clamp(region->top / denominator, 0, g->full_height - 1);
  const int y1 = std::clamp((region->top + region->height + denominator - 1) / denominator, y0 + 1,
                            g->full_height);
  // Two more columns each side: at the edges of a cropped scanline the chroma upsampling sees
  // no neighbour, so the outermost column of a crop can differ from the whole decode.
  const int x0 = std::clamp(region->left / denominator - kCropSlack, 0, g->full_width - 1);
  const int x1 =
      std::clamp((region->left + region->width + denominator - 1) / denominator + kCropSlack,
                 x0 + 1, g->full_width);
  JDIMENSION left = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(x1 - x0);
  if (x1 - x0 < g->full_width) jpeg_crop_scanline(&d->cinfo, &left, &width);
  g->left = static_cast<int>(left);
  g->width = static_cast<int>(d->cinfo.output_width);
  g->top = y0;
  g->height = y1 - y0;
  if (y0 > 0) jpeg_skip_scanlines(&d->cinfo, static_cast<JDIMENSION>(y0));
  return true;
}

bool ReadRows(Decoder* d, uint8_t* pixels, size_t row_bytes, int rows) {
  if (setjmp(d->err.jump)) return false;
  int done = 0;
  while (done < rows) {
    JSAMPROW row = pixels + row_bytes * done;
    if (jpeg_read_scanlines(&d->cinfo, &row, 1) != 1) break;
    ++done;
  }
  return done == rows;
}

Status Failure(const Decoder& d, const char* what) {
  if (d.err.premature_end)
    return Status::DataLoss(std::string("truncated JPEG (") + what +
                            ": Premature end of JPEG file); the file was cut off: download or "
                            "copy it again");
  return Status::DataLoss(std::string("corrupt JPEG (") + what + ": " + d.err.message + ")");
}

}  // namespace

StatusOr<Image> DecodeJpegRegion(const uint8_t* data, size_t size, int denominator, int channels,
                                 const PixelRect& region) {
  Decoder d;
  d.cinfo.err = jpeg_std_error(&d.err.pub);
  d.err.pub.error_exit = ErrorExit;
  d.err.pub.emit_message = EmitMessage;
  d.err.message[0] = 0;
  d.err.premature_end = false;
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
  Geometry g;
  if (!Start(&d, data, size, denominator, channels, &region, &g)) return Failure(d, "header");
  if (g.cmyk) return Status::Unimplemented("CMYK JPEG: decode it whole");
  Image image;
  image.channels = channels;
  image.height = g.height;
  image.width = g.width;
  image.origin_y = g.top;
  image.origin_x = g.left;
  image.decoded_height = g.full_height;
  image.decoded_width = g.full_width;
  const size_t row_bytes = static_cast<size_t>(g.width) * channels;
  image.pixels.resize(row_bytes * g.height);
  if (!ReadRows(&d, image.pixels.data(), row_bytes, g.height) || d.err.premature_end)
    return Failure(d, "decode");
  jpeg_abort_decompress(&d.cinfo);
  return image;
}

}  // namespace mlcd::worker
