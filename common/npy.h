// NumPy .npy files (format versions 1.0-3.0), the exchange format for features, centroids,
// labels and ids across the system.
//
// Reading memory-maps the file and validates everything a user can get wrong (not an npy,
// unsupported dtype, Fortran order, truncated data) with a message that names the file.
// Writing is atomic: a temporary file is written, fsynced and renamed over the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/confined_file.h"
#include "common/data_roots.h"
#include "common/status.h"

namespace mlcd {

enum class NpyDtype {
  kFloat16,  // '<f2'
  kFloat32,  // '<f4'
  kFloat64,  // '<f8'
  kInt8,     // '|i1'
  kUint8,    // '|u1'
  kInt32,    // '<i4'
  kInt64,    // '<i8'
  kUint32,   // '<u4'
  kUint64,   // '<u8'
};

// "<f4" etc.
const char* NpyDescr(NpyDtype dtype);
// Human name: "float32" etc.
const char* NpyDtypeName(NpyDtype dtype);
size_t NpyDtypeSize(NpyDtype dtype);

struct NpyHeader {
  NpyDtype dtype = NpyDtype::kFloat32;
  std::vector<int64_t> shape;  // empty = 0-d scalar
  bool fortran_order = false;
  size_t data_offset = 0;  // bytes from the start of the file to the data

  int64_t num_elements() const;
  size_t data_bytes() const { return static_cast<size_t>(num_elements()) * NpyDtypeSize(dtype); }
  // Rows and columns of a 1-d (n x 1) or 2-d array.
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const;
};

// Parses the magic, version and header dict at the start of `bytes`. `name` is used in
// error messages (usually the path). Big-endian and Fortran-ordered arrays are rejected.
// The header is untrusted input: 'descr', 'fortran_order' and 'shape' must be present, the
// shape a tuple of non-negative integers whose byte size fits in int64 (so num_elements(),
// cols() and data_bytes() of a parsed header never overflow); anything else is
// INVALID_ARGUMENT naming the file. Never throws.
StatusOr<NpyHeader> ParseNpyHeader(const void* bytes, size_t size, const std::string& name);

// A read-only memory map of an .npy file. Movable, not copyable.
class MappedNpy {
 public:
  // Opens and validates `path`: NOT_FOUND when missing, INVALID_ARGUMENT when not a valid
  // C-order little-endian npy, DATA_LOSS when the file is shorter than its header says, so
  // data() always holds data_bytes() readable bytes. Opened through OpenConfinedRead
  // (common/confined_file.h): with `roots`, else the process's, a file outside them (even one
  // reached through a link swapped in after a check) is PERMISSION_DENIED, unread.
  static StatusOr<MappedNpy> Open(const std::string& path, const DataRoots* roots = nullptr);

  MappedNpy(MappedNpy&& other) noexcept;
  MappedNpy& operator=(MappedNpy&& other) noexcept;
  MappedNpy(const MappedNpy&) = delete;
  MappedNpy& operator=(const MappedNpy&) = delete;
  ~MappedNpy();

  const NpyHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  NpyDtype dtype() const { return header_.dtype; }
  int64_t rows() const { return header_.rows(); }
  int64_t cols() const { return header_.cols(); }
  const void* data() const { return static_cast<const char*>(map_) + header_.data_offset; }
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data());
  }

  // Checks the array is 2-d (or 1-d when allow_1d) with one of the given dtypes.
  Status Expect2d(std::initializer_list<NpyDtype> dtypes, bool allow_1d = false) const;

  // Advises the kernel that rows [begin, end) are no longer needed (releases page cache
  // pressure when streaming through shards larger than memory).
  void DropRows(int64_t begin, int64_t end) const;

 private:
  MappedNpy() = default;
  std::string path_;
  NpyHeader header_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

// An owning in-memory array, for small files (labels, ids, centroids).
struct NpyArray {
  NpyHeader header;
  std::vector<uint8_t> bytes;  // data only, header.num_elements() * dtype size

  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <typename T>
  T* mutable_data_as() {
    return reinterpret_cast<T*>(bytes.data());
  }
};

// The readers below return RESOURCE_EXHAUSTED when the copy cannot be allocated; `roots` as
// for MappedNpy::Open.
StatusOr<NpyArray> ReadNpy(const std::string& path, const DataRoots* roots = nullptr);

// Reads a 1-d or 2-d integer array (any int/uint dtype) as int64, e.g. ids or labels.
StatusOr<std::vector<int64_t>> ReadNpyAsInt64(const std::string& path,
                                              std::vector<int64_t>* shape = nullptr,
                                              const DataRoots* roots = nullptr);
// Elements [begin, end) (C order) of a 1-d or 2-d integer array as int64, touching only their
// pages of the map: a gang rank's slice of a sample-id or class file, never the whole file.
// INVALID_ARGUMENT for a range outside [0, num_elements()] or a non-integer dtype.
StatusOr<std::vector<int64_t>> ReadNpyRangeAsInt64(const MappedNpy& npy, int64_t begin,
                                                   int64_t end);
// Reads a float16/32/64 array as float32.
StatusOr<std::vector<float>> ReadNpyAsFloat32(const std::string& path,
                                              std::vector<int64_t>* shape = nullptr,
                                              const DataRoots* roots = nullptr);

// Serialises a header (format 1.0, or 2.0 when the dict needs it), padded to 64 bytes.
std::string EncodeNpyHeader(NpyDtype dtype, const std::vector<int64_t>& shape);

// Writes `data` (C order, num_elements(shape) * dtype size bytes) atomically to `path`, whose
// directory must exist; through WriteConfinedFile (common/confined_file.h), so with `roots`,
// else the process's, the directory is opened and verified once and the file created inside
// it.
Status WriteNpy(const std::string& path, NpyDtype dtype, const std::vector<int64_t>& shape,
                const void* data, const DataRoots* roots = nullptr);
// The same, as the file `name` inside the opened directory `dir`.
Status WriteNpyIn(const ConfinedDir& dir, const std::string& name, NpyDtype dtype,
                  const std::vector<int64_t>& shape, const void* data);

// IEEE half <-> single conversions (round to nearest even).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
// Converts n halves to floats.
void HalfToFloatN(const uint16_t* in, float* out, size_t n);

}  // namespace mlcd
