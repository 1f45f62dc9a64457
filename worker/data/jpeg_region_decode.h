// Decoding only the part of a JPEG a crop needs (libjpeg-turbo's scanline API): rows above
// the region are skipped without the inverse DCT (jpeg_skip_scanlines), rows below are never
// read, and columns outside it are cropped to whole iMCUs (jpeg_crop_scanline). Used by
// DecodeImage when DecodeOptions::region is set; the pixels inside the region are those of a
// full decode at the same scale (columns just outside it may differ: the chroma upsampling at
// a cropped edge has no neighbour).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "worker/data/image_decode.h"

namespace mlcd::worker {

// Decodes at 1/denominator (1, 2, 4, 8) the rows and iMCU columns covering `region` (given in
// full-size pixels, clamped to the image) to `channels` (1 or 3). The result's origin /
// decoded size say where it lies in the whole scaled image. UNIMPLEMENTED for CMYK / YCCK
// JPEGs (the caller decodes those whole); DATA_LOSS for corrupt or truncated data.
StatusOr<Image> DecodeJpegRegion(const uint8_t* data, size_t size, int denominator, int channels,
                                 const PixelRect& region);

}  // namespace mlcd::worker
