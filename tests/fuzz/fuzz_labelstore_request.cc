// libFuzzer target: the label store's request validation (set names, CreateLabelSet, one
// WriteLabels message against a set's shape, read sizes). The first byte picks the request.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "clients/labelstore_limits.h"
#include "mlcd/v1/labelstore.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 4;
  ++data;
  --size;
  using namespace mlcd::labelstore;
  switch (which) {
    case 0:
      (void)ValidateLabelSetName(std::string(reinterpret_cast<const char*>(data), size));
      break;
    case 1: {
      mlcd::v1::CreateLabelSetRequest request;
      if (request.ParseFromArray(data, static_cast<int>(size)))
        (void)ValidateCreateRequest(request);
      break;
    }
    case 2: {
      if (size < 9) return 0;
      LabelSetShape shape;
      shape.num_classes = static_cast<int32_t>(data[0] | data[1] << 8 | data[2] << 16);
      shape.labels_per_sample = static_cast<int32_t>(data[3] | data[4] << 8) - 16;
      shape.with_scores = data[5] & 1;
      mlcd::v1::WriteLabelsRequest request;
      std::vector<uint64_t> scratch;
      if (request.ParseFromArray(data + 6, static_cast<int>(size - 6)))
        (void)ValidateWriteMessage(request, shape, &scratch);
      break;
    }
    default: {
      if (size < 12) return 0;
      uint64_t n = 0;
      int32_t l = 0;
      for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(data[i]) << (8 * i);
      for (int i = 0; i < 4; ++i) l |= static_cast<int32_t>(data[8 + i]) << (8 * i);
      (void)ValidateReadSize(static_cast<size_t>(n), l);
      break;
    }
  }
  return 0;
}
