// libFuzzer target: the .npy reader (header dict, shape, dtype, sizes, the data that follows).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/npy.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)mlcd::ParseNpyHeader(data, size, "fuzz.npy");
  const std::string path = mlcd::fuzz::InputFile(data, size);
  if (path.empty()) return 0;
  auto mapped = mlcd::MappedNpy::Open(path);
  if (mapped.ok()) (void)mapped->header().shape.size();
  std::vector<int64_t> shape;
  (void)mlcd::ReadNpyAsFloat32(path, &shape);
  (void)mlcd::ReadNpyAsInt64(path);
  return 0;
}
