// The safetensors file format (Hugging Face's; what `safetensors.torch.load_file` reads), for
// exporting encoders (worker/model/export.h). No torch here: tensors are named float32
// buffers.
//
// Layout of a file:
//   8 bytes        N, unsigned little-endian: the size of the header
//   N bytes        the header, UTF-8 JSON, padded with spaces so the data starts at a multiple
//                  of 8 bytes:
//                    {"__metadata__": {"key": "value", ...},          (strings only; optional)
//                     "<name>": {"dtype": "F32", "shape": [d0, d1, ...],
//                                "data_offsets": [begin, end]}, ...}
//   the data       every tensor's bytes, C order, little-endian; offsets count from the first
//                  byte after the header; the tensors lie back to back in name order (the
//                  order the reference writer uses for tensors of one dtype), so the buffer
//                  is fully covered, with no holes or overlaps, and each tensor starts at a
//                  multiple of its element size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // product(shape) floats, C order
};

// Writes `tensors` (float32, "F32") with `metadata` to `path` atomically (temp file, fsync,
// rename). INVALID_ARGUMENT for an empty or duplicate name, a name "__metadata__", a
// negative dimension or a null buffer.
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// A file read back (tests, tools): float32 tensors only.
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::map<std::string, Tensor> tensors;
};

// Reads a safetensors file of F32 tensors. DATA_LOSS naming the problem for a truncated or
// malformed file (header size beyond the file, bad JSON, offsets outside the data or not
// matching the shape, holes between tensors); INVALID_ARGUMENT for another dtype.
StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace mlcd::worker
