// FNV-1a, 64-bit: a stable hash of text for names and cache keys that must not change between
// builds, runs or machines (std::hash may). Not for security.
#pragma once

#include <cstdint>
#include <string_view>

namespace mlcd {

inline constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

// The hash of `text`, continuing from `h` (chain calls to hash several pieces).
inline uint64_t Fnv1a(std::string_view text, uint64_t h = kFnv1aOffset) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace mlcd
