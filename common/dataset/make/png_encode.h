// PNG encoding of 8-bit grey or RGB pixels (libpng) for the generated datasets. The encoder's
// settings are fixed (no filter, zlib's default level, no time or text chunk), so the same
// pixels give the same bytes wherever the same zlib runs.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace mlcd {

// `pixels` is height x width x channels (HWC, channels 1 or 3). INTERNAL when libpng fails;
// INVALID_ARGUMENT for a bad shape.
StatusOr<std::string> EncodePng(const uint8_t* pixels, int height, int width, int channels);

}  // namespace mlcd
