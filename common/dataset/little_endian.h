// Little-endian integers in the dataset index's binary files (samples.bin, annotations.bin).
#pragma once

#include <cstdint>
#include <string>

namespace mlcd {

// Appends the low `bytes` bytes of v, least significant first.
inline void PutLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Reads `bytes` bytes at p, least significant first.
inline uint64_t GetLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace mlcd
