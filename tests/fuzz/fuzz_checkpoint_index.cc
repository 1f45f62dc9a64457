// libFuzzer target: a checkpoint's backbone index (backbone.json) and the slice bounds every
// parameter is checked against before it is copied. The first 8 bytes give the array size.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "worker/train/checkpoint_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int64_t total = 0;
  if (size >= sizeof(total)) {
    std::memcpy(&total, data, sizeof(total));
    data += sizeof(total);
    size -= sizeof(total);
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  int64_t step = 0;
  auto entries = mlcd::worker::ParseBackboneIndex(text, "backbone.json", &step);
  if (!entries.ok()) return 0;
  for (const auto& [name, e] : *entries) {
    if (mlcd::worker::CheckParamSlice(name, e.offset, e.numel, total, "weights").ok()) {
      // What the reader then does: the slice must be addressable in `total` values.
      if (e.offset + e.numel > total) __builtin_trap();
    }
  }
  return 0;
}
