// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TensorBoard's event files,
// TFRecord and LevelDB's logs use it, and their "masked" form.
//
// Table-driven (slicing by one byte). No linked library offers it as a function: RocksDB's
// crc32c is internal (only a file-checksum factory is public) and Debian 12's abseil
// (20220623) predates absl/crc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlcd {

// The CRC-32C of `n` bytes, continuing from `crc` (the CRC of the bytes before; 0 to start):
// Crc32c(ab) == Crc32c(b, Crc32c(a)).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// TensorFlow's masking of a stored CRC (so a CRC of data holding CRCs stays strong):
// rotate right by 15 bits, add 0xa282ead8.
uint32_t MaskCrc32c(uint32_t crc);
uint32_t UnmaskCrc32c(uint32_t masked);

}  // namespace mlcd
