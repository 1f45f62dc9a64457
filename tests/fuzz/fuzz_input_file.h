// The fuzzers' way to hand bytes to readers that take a path: one memfd per process, rewritten
// for every input, named /proc/self/fd/N. No disk traffic, nothing left behind.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mlcd::fuzz {

inline std::string InputFile(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("mlcd-fuzz-input", 0);
  if (fd < 0) return "";
  if (ftruncate(fd, 0) != 0) return "";
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) return "";
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace mlcd::fuzz
