// libFuzzer target: the IDX readers (Fashion-MNIST images and labels, gzipped or not).
#include <cstddef>
#include <cstdint>

#include "common/idx.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlcd::fuzz::InputFile(data, size);
  if (path.empty()) return 0;
  (void)mlcd::ReadIdxImages(path, 0);
  (void)mlcd::ReadIdxImages(path, 3);
  (void)mlcd::ReadIdxLabels(path, 0);
  return 0;
}
