#include "common/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "common/confined_file.h"
#include "common/file_util.h"

namespace mlcd {
namespace {

struct DtypeInfo {
  NpyDtype dtype;
  const char* descr;
  const char* name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {NpyDtype::kFloat16, "<f2", "float16", 2}, {NpyDtype::kFloat32, "<f4", "float32", 4},
    {NpyDtype::kFloat64, "<f8", "float64", 8}, {NpyDtype::kInt8, "|i1", "int8", 1},
    {NpyDtype::kUint8, "|u1", "uint8", 1},     {NpyDtype::kInt32, "<i4", "int32", 4},
    {NpyDtype::kInt64, "<i8", "int64", 8},     {NpyDtype::kUint32, "<u4", "uint32", 4},
    {NpyDtype::kUint64, "<u8", "uint64", 8},
};

const DtypeInfo& Info(NpyDtype dtype) {
  for (const auto& info : kDtypes)
    if (info.dtype == dtype) return info;
  return kDtypes[1];
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  size_t e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Finds the value text of 'key' in a Python dict literal like
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// Only a key counts: the quoted name must follow '{' or ',' and be followed by ':' (spaces
// allowed), so 'shape' inside another key or a string value is not taken for it.
size_t FindDictKey(const std::string& dict, const std::string& quoted) {
  for (size_t k = dict.find(quoted); k != std::string::npos; k = dict.find(quoted, k + 1)) {
    size_t before = dict.find_last_not_of(" \t\n", k == 0 ? std::string::npos : k - 1);
    if (k == 0 || before == std::string::npos || (dict[before] != '{' && dict[before] != ','))
      continue;
    size_t after = dict.find_first_not_of(" \t\n", k + quoted.size());
    if (after != std::string::npos && dict[after] == ':') return after;
  }
  return std::string::npos;
}

bool DictValue(const std::string& dict, const std::string& key, std::string* value) {
  size_t colon = FindDictKey(dict, "'" + key + "'");
  if (colon == std::string::npos) colon = FindDictKey(dict, "\"" + key + "\"");
  if (colon == std::string::npos) return false;
  size_t start = colon + 1;
  while (start < dict.size() && dict[start] == ' ') ++start;
  if (start >= dict.size()) return false;
  size_t end;
  if (dict[start] == '(') {
    end = dict.find(')', start);
    if (end == std::string::npos) return false;
    ++end;
  } else if (dict[start] == '\'' || dict[start] == '"') {
    end = dict.find(dict[start], start + 1);
    if (end == std::string::npos) return false;
    ++end;
  } else {
    end = dict.find_first_of(",}", start);
    if (end == std::string::npos) return false;
  }
  *value = Trim(dict.substr(start, end - start));
  return true;
}

// Parses a shape tuple "(3, 4)", "(3,)" or "()" into `dims`: every element a non-negative
// decimal integer below 2^63, a trailing comma allowed, nothing else.
Status ParseShape(const std::string& text, const std::string& name, std::vector<int64_t>* dims) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(name + ": malformed .npy shape '" + text + "': " + why +
                                   "; expected a tuple of non-negative integers like (3, 4)");
  };
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    return bad("not a parenthesised tuple");
  const std::string inner = text.substr(1, text.size() - 2);
  if (Trim(inner).empty()) return Status::Ok();  // () is a 0-d scalar
  size_t pos = 0;
  while (true) {
    size_t comma = inner.find(',', pos);
    std::string item =
        Trim(inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    const bool last = comma == std::string::npos;
    if (item.empty()) {
      // Only "(3,)": an empty item after the final comma of a non-empty tuple.
      if (last && !dims->empty()) return Status::Ok();
      return bad("empty dimension");
    }
    if (item[0] == '-') return bad("negative dimension " + item);
    if (item.find_first_not_of("0123456789") != std::string::npos)
      return bad("dimension '" + item + "' is not an integer");
    errno = 0;
    unsigned long long v = std::strtoull(item.c_str(), nullptr, 10);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      return bad("dimension " + item + " is too large");
    dims->push_back(static_cast<int64_t>(v));
    if (last) return Status::Ok();
    pos = comma + 1;
  }
}

}  // namespace

const char* NpyDescr(NpyDtype dtype) { return Info(dtype).descr; }
const char* NpyDtypeName(NpyDtype dtype) { return Info(dtype).name; }
size_t NpyDtypeSize(NpyDtype dtype) { return Info(dtype).size; }

int64_t NpyHeader::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t NpyHeader::cols() const {
  if (shape.size() < 2) return 1;
  int64_t c = 1;
  for (size_t i = 1; i < shape.size(); ++i) c *= shape[i];
  return c;
}

namespace {

StatusOr<NpyHeader> ParseNpyHeaderOrThrow(const void* bytes, size_t size, const std::string& name) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) {
    return Status::InvalidArgument(name +
                                   ": not an .npy file (missing the \\x93NUMPY magic); "
                                   "write it with numpy.save");
  }
  int major = p[6];
  size_t header_len, prefix;
  if (major == 1) {
    header_len = p[8] | (p[9] << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return Status::DataLoss(name + ": truncated .npy header");
    header_len = p[8] | (p[9] << 8) | (static_cast<size_t>(p[10]) << 16) |
                 (static_cast<size_t>(p[11]) << 24);
    prefix = 12;
  } else {
    return Status::InvalidArgument(name + ": unsupported .npy format version " +
                                   std::to_string(major));
  }
  if (prefix + header_len > size) return Status::DataLoss(name + ": truncated .npy header");
  std::string dict(reinterpret_cast<const char*>(p + prefix), header_len);

  NpyHeader header;
  header.data_offset = prefix + header_len;
  std::string descr, fortran, shape;
  if (!DictValue(dict, "descr", &descr) || !DictValue(dict, "fortran_order", &fortran) ||
      !DictValue(dict, "shape", &shape)) {
    return Status::InvalidArgument(name + ": malformed .npy header dict: " + Trim(dict));
  }
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') ||
      descr.back() != descr.front()) {
    return Status::InvalidArgument(
        name +
        ": malformed .npy header: 'descr' must be a quoted dtype string like "
        "'<f4', got " +
        descr);
  }
  descr = descr.substr(1, descr.size() - 2);  // strip quotes
  bool found = false;
  for (const auto& info : kDtypes) {
    // Accept '=' and '<' (native little-endian) and '|' for one-byte types.
    std::string alt = info.descr;
    if (descr == alt ||
        (descr.size() == alt.size() && (descr[0] == '=' || descr[0] == '<' || descr[0] == '|') &&
         descr.substr(1) == alt.substr(1))) {
      header.dtype = info.dtype;
      found = true;
      break;
    }
  }
  if (!found) {
    std::string hint = descr.size() && descr[0] == '>'
                           ? " (big-endian arrays are not supported; use "
                             "arr.astype(arr.dtype.newbyteorder('<')))"
                           : "";
    return Status::InvalidArgument(name + ": unsupported dtype '" + descr +
                                   "'; expected one of float16, float32, float64, int8, uint8, "
                                   "int32, int64, uint32, uint64" +
                                   hint);
  }
  if (fortran == "True") {
    return Status::InvalidArgument(name +
                                   ": Fortran-ordered array; save a C-ordered copy "
                                   "(numpy.ascontiguousarray)");
  }
  if (fortran != "False")
    return Status::InvalidArgument(name + ": malformed fortran_order '" + fortran + "'");
  // Typed reads of the (mapped) data need it aligned: numpy pads the header so the data starts
  // at a multiple of 64 (16 in old versions). Found by fuzz_npy (a float16 array at byte 127).
  if (header.data_offset % NpyDtypeSize(header.dtype) != 0) {
    return Status::InvalidArgument(
        name + ": the data starts at byte " + std::to_string(header.data_offset) +
        ", not a multiple of the element size " + std::to_string(NpyDtypeSize(header.dtype)) +
        " (numpy pads the header to 64 bytes); save it again with numpy");
  }
  MLCD_RETURN_IF_ERROR(ParseShape(shape, name, &header.shape));
  // The byte size must be representable, so num_elements(), cols() and data_bytes() cannot
  // overflow. Zero dimensions are skipped: a (0, d) array still needs a sane d.
  int64_t total = static_cast<int64_t>(NpyDtypeSize(header.dtype));
  for (int64_t d : header.shape) {
    if (d != 0 && __builtin_mul_overflow(total, d, &total)) {
      return Status::InvalidArgument(name + ": shape " + shape + " of " +
                                     NpyDtypeName(header.dtype) +
                                     " overflows a 64-bit byte count; the header is corrupt");
    }
  }
  return header;
}

// Resizes `v` to n values: RESOURCE_EXHAUSTED instead of std::bad_alloc.
template <typename T>
Status Allocate(std::vector<T>* v, size_t n, const std::string& path) {
  try {
    v->resize(n);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(path + ": cannot allocate " + std::to_string(n * sizeof(T)) +
                                     " bytes to read it into memory");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<NpyHeader> ParseNpyHeader(const void* bytes, size_t size, const std::string& name) {
  // The parser checks every index it uses; this only keeps a missed case from escaping as an
  // exception (e.g. through an OpenMP region, where it would terminate the process).
  try {
    return ParseNpyHeaderOrThrow(bytes, size, name);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(name + ": malformed .npy header (" + e.what() + ")");
  }
}

MappedNpy::MappedNpy(MappedNpy&& other) noexcept { *this = std::move(other); }

MappedNpy& MappedNpy::operator=(MappedNpy&& other) noexcept {
  if (this != &other) {
    if (map_) munmap(map_, map_size_);
    path_ = std::move(other.path_);
    header_ = other.header_;
    map_ = other.map_;
    map_size_ = other.map_size_;
    other.map_ = nullptr;
    other.map_size_ = 0;
  }
  return *this;
}

MappedNpy::~MappedNpy() {
  if (map_) munmap(map_, map_size_);
}

StatusOr<MappedNpy> MappedNpy::Open(const std::string& path, const DataRoots* roots) {
  StatusOr<UniqueFd> opened = OpenConfinedRead(path, "path", roots);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNotFound)
      return Status::NotFound(path + ": no such file");
    return opened.status();
  }
  const int fd = opened->get();
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return Status::InvalidArgument(path + ": not a regular file");
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return Status::InvalidArgument(path + ": empty file, not an .npy file");
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return Status::Internal(path + ": mmap failed: " + std::strerror(errno));
  MappedNpy out;
  out.path_ = path;
  out.map_ = map;
  out.map_size_ = size;
  MLCD_ASSIGN_OR_RETURN(out.header_, ParseNpyHeader(map, size, path));
  // data_offset <= size (checked by the parser); compare without adding to avoid overflow.
  if (out.header_.data_bytes() > size - out.header_.data_offset) {
    return Status::DataLoss(
        path + ": truncated: the header promises " + std::to_string(out.header_.data_bytes()) +
        " bytes of data but the file holds " + std::to_string(size - out.header_.data_offset));
  }
  return out;
}

Status MappedNpy::Expect2d(std::initializer_list<NpyDtype> dtypes, bool allow_1d) const {
  bool ok_dtype = false;
  std::string names;
  for (NpyDtype d : dtypes) {
    ok_dtype |= d == header_.dtype;
    if (!names.empty()) names += " or ";
    names += NpyDtypeName(d);
  }
  if (!ok_dtype) {
    return Status::InvalidArgument(path_ + ": dtype " + NpyDtypeName(header_.dtype) +
                                   " is not supported here; expected " + names);
  }
  if (header_.shape.size() != 2 && !(allow_1d && header_.shape.size() == 1)) {
    return Status::InvalidArgument(path_ + ": expected a 2-d array (n x d), got " +
                                   std::to_string(header_.shape.size()) + " dimensions");
  }
  return Status::Ok();
}

void MappedNpy::DropRows(int64_t begin, int64_t end) const {
  if (!map_ || end <= begin) return;
  size_t row_bytes = static_cast<size_t>(cols()) * NpyDtypeSize(header_.dtype);
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t from = header_.data_offset + static_cast<size_t>(begin) * row_bytes;
  size_t to = header_.data_offset + static_cast<size_t>(end) * row_bytes;
  from = (from + page - 1) / page * page;
  to = to / page * page;
  if (to > from) madvise(static_cast<char*>(map_) + from, to - from, MADV_DONTNEED);
}

StatusOr<NpyArray> ReadNpy(const std::string& path, const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(MappedNpy mapped, MappedNpy::Open(path, roots));
  NpyArray array;
  array.header = mapped.header();
  const auto* begin = static_cast<const uint8_t*>(mapped.data());
  MLCD_RETURN_IF_ERROR(Allocate(&array.bytes, mapped.header().data_bytes(), path));
  std::copy(begin, begin + mapped.header().data_bytes(), array.bytes.begin());
  array.header.data_offset = 0;
  return array;
}

StatusOr<std::vector<int64_t>> ReadNpyRangeAsInt64(const MappedNpy& m, int64_t begin,
                                                   int64_t end) {
  const std::string& path = m.path();
  if (m.header().shape.size() > 2)
    return Status::InvalidArgument(path + ": expected a 1-d or 2-d array");
  const int64_t total = m.header().num_elements();
  if (begin < 0 || end < begin || end > total) {
    return Status::InvalidArgument(path + ": elements [" + std::to_string(begin) + ", " +
                                   std::to_string(end) + ") asked of an array of " +
                                   std::to_string(total));
  }
  const size_t n = static_cast<size_t>(end - begin), b = static_cast<size_t>(begin);
  std::vector<int64_t> out;
  MLCD_RETURN_IF_ERROR(Allocate(&out, n, path));
  switch (m.dtype()) {
    case NpyDtype::kInt8:
      for (size_t i = 0; i < n; ++i) out[i] = m.data_as<int8_t>()[b + i];
      break;
    case NpyDtype::kUint8:
      for (size_t i = 0; i < n; ++i) out[i] = m.data_as<uint8_t>()[b + i];
      break;
    case NpyDtype::kInt32:
      for (size_t i = 0; i < n; ++i) out[i] = m.data_as<int32_t>()[b + i];
      break;
    case NpyDtype::kUint32:
      for (size_t i = 0; i < n; ++i) out[i] = m.data_as<uint32_t>()[b + i];
      break;
    case NpyDtype::kInt64:
      if (n > 0) std::memcpy(out.data(), m.data_as<int64_t>() + b, n * 8);  // (0, d): no data
      break;
    case NpyDtype::kUint64:
      for (size_t i = 0; i < n; ++i) {
        uint64_t v = m.data_as<uint64_t>()[b + i];
        if (v > static_cast<uint64_t>(INT64_MAX))
          return Status::InvalidArgument(path + ": value at index " + std::to_string(b + i) +
                                         " exceeds int64");
        out[i] = static_cast<int64_t>(v);
      }
      break;
    default:
      return Status::InvalidArgument(path + ": dtype " + std::string(NpyDtypeName(m.dtype())) +
                                     " is not an integer type");
  }
  return out;
}

StatusOr<std::vector<int64_t>> ReadNpyAsInt64(const std::string& path, std::vector<int64_t>* shape,
                                              const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(MappedNpy m, MappedNpy::Open(path, roots));
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> out,
                        ReadNpyRangeAsInt64(m, 0, m.header().num_elements()));
  if (shape) *shape = m.header().shape;
  return out;
}

StatusOr<std::vector<float>> ReadNpyAsFloat32(const std::string& path, std::vector<int64_t>* shape,
                                              const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(MappedNpy m, MappedNpy::Open(path, roots));
  size_t n = static_cast<size_t>(m.header().num_elements());
  std::vector<float> out;
  MLCD_RETURN_IF_ERROR(Allocate(&out, n, path));
  switch (m.dtype()) {
    case NpyDtype::kFloat32:
      if (n > 0) std::memcpy(out.data(), m.data(), n * 4);  // (0, d): no data pointer
      break;
    case NpyDtype::kFloat16:
      HalfToFloatN(m.data_as<uint16_t>(), out.data(), n);
      break;
    case NpyDtype::kFloat64:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(m.data_as<double>()[i]);
      break;
    default:
      return Status::InvalidArgument(path + ": dtype " + std::string(NpyDtypeName(m.dtype())) +
                                     " is not a float type (expected float16, float32 or float64)");
  }
  if (shape) *shape = m.header().shape;
  return out;
}

std::string EncodeNpyHeader(NpyDtype dtype, const std::vector<int64_t>& shape) {
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    shape_text += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) shape_text += ",";
    if (i + 1 < shape.size()) shape_text += " ";
  }
  shape_text += ")";
  std::string dict = std::string("{'descr': '") + NpyDescr(dtype) +
                     "', 'fortran_order': False, 'shape': " + shape_text + ", }";
  // Like numpy.save: room for the first axis to grow to 21 digits without rewriting the data.
  if (!shape.empty()) dict.append(21 - std::to_string(shape[0]).size(), ' ');
  size_t prefix = 10;
  size_t total = prefix + dict.size() + 1;  // + '\n'
  bool v2 = false;
  if ((total + 63) / 64 * 64 - prefix > 65535) {
    v2 = true;
    prefix = 12;
    total = prefix + dict.size() + 1;
  }
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(v2 ? 2 : 1);
  out.push_back(0);
  size_t len = dict.size();
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>((len >> 8) & 0xff));
  if (v2) {
    out.push_back(static_cast<char>((len >> 16) & 0xff));
    out.push_back(static_cast<char>((len >> 24) & 0xff));
  }
  return out + dict;
}

Status WriteNpyIn(const ConfinedDir& dir, const std::string& name, NpyDtype dtype,
                  const std::vector<int64_t>& shape, const void* data) {
  std::string header = EncodeNpyHeader(dtype, shape);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  size_t bytes = static_cast<size_t>(n) * NpyDtypeSize(dtype);
  return dir.WriteFileAtomically(name, {{header.data(), header.size()}, {data, bytes}});
}

Status WriteNpy(const std::string& path, NpyDtype dtype, const std::vector<int64_t>& shape,
                const void* data, const DataRoots* roots) {
  std::string name;
  MLCD_ASSIGN_OR_RETURN(ConfinedDir dir,
                        OpenConfinedParent(path, "path", /*create=*/false, &name, roots));
  return WriteNpyIn(dir, name, dtype, shape, data);
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000)
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (abs < 0x38800000) {                                              // subnormal or zero
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 113 - e + 13
    uint32_t half_m = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1))) ++half_m;
    return static_cast<uint16_t>(sign | half_m);
  }
  uint32_t e = (abs >> 23) - 127 + 15;
  uint32_t m = abs & 0x7fffff;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

void HalfToFloatN(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

}  // namespace mlcd
