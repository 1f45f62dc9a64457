#include "common/npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/file_util.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

TEST(Npy, RoundTripFloat32Matrix) {
  testing::TempDir dir;
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(WriteNpy(dir.Sub("a.npy"), NpyDtype::kFloat32, {2, 3}, data.data()).ok());
  auto m = MappedNpy::Open(dir.Sub("a.npy"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->rows(), 2);
  EXPECT_EQ(m->cols(), 3);
  EXPECT_EQ(m->dtype(), NpyDtype::kFloat32);
  EXPECT_EQ(m->header().data_offset % 64, 0u);
  EXPECT_EQ(std::memcmp(m->data(), data.data(), 24), 0);
  EXPECT_TRUE(m->Expect2d({NpyDtype::kFloat32}).ok());
  EXPECT_FALSE(m->Expect2d({NpyDtype::kInt32}).ok());
}

TEST(Npy, HeaderMatchesNumpyByteForByte) {
  // numpy.save(f, numpy.zeros((2, 3), numpy.float32)) writes exactly these 128 header bytes.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict +
                         std::string(117 - dict.size(), ' ') + "\n";
  std::string h = EncodeNpyHeader(NpyDtype::kFloat32, {2, 3});
  EXPECT_EQ(h.size(), 128u);
  EXPECT_EQ(h, expected);
  std::string one = EncodeNpyHeader(NpyDtype::kInt64, {5});
  EXPECT_NE(one.find("'shape': (5,)"), std::string::npos);
  std::string scalar = EncodeNpyHeader(NpyDtype::kFloat32, {});
  EXPECT_NE(scalar.find("'shape': ()"), std::string::npos);
}

TEST(Npy, ScalarAndIntReads) {
  testing::TempDir dir;
  float loss = 0.25f;
  ASSERT_TRUE(WriteNpy(dir.Sub("s.npy"), NpyDtype::kFloat32, {}, &loss).ok());
  std::vector<int64_t> shape;
  auto v = ReadNpyAsFloat32(dir.Sub("s.npy"), &shape);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(shape.empty());
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ((*v)[0], 0.25f);

  std::vector<uint64_t> ids = {7, 9, 1ull << 40};
  ASSERT_TRUE(WriteNpy(dir.Sub("ids.npy"), NpyDtype::kUint64, {3}, ids.data()).ok());
  auto i = ReadNpyAsInt64(dir.Sub("ids.npy"));
  ASSERT_TRUE(i.ok());
  EXPECT_EQ((*i)[2], int64_t{1} << 40);
}

// A gang rank reads only its range of a sample-id or class file: for every split of the
// elements over 1..5 ranks and every integer dtype, the ranks' range reads are the slices of
// the whole read, in order; a range outside the array and a float array are refused.
TEST(Npy, RangeReadsEqualTheSlicesOfTheWhole) {
  testing::TempDir dir;
  std::vector<int64_t> values(23 * 2);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i * 37 % 101);
  std::vector<int8_t> i8(values.begin(), values.end());
  std::vector<int32_t> i32(values.begin(), values.end());
  std::vector<uint64_t> u64(values.begin(), values.end());
  struct File {
    std::string name;
    NpyDtype dtype;
    std::vector<int64_t> shape;
    const void* data;
  };
  for (const File& f : {File{"i8.npy", NpyDtype::kInt8, {46}, i8.data()},
                        File{"i32.npy", NpyDtype::kInt32, {23, 2}, i32.data()},
                        File{"i64.npy", NpyDtype::kInt64, {46}, values.data()},
                        File{"u64.npy", NpyDtype::kUint64, {46}, u64.data()}}) {
    ASSERT_TRUE(WriteNpy(dir.Sub(f.name), f.dtype, f.shape, f.data).ok());
    auto whole = ReadNpyAsInt64(dir.Sub(f.name));
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    ASSERT_EQ(*whole, values) << f.name;
    auto map = MappedNpy::Open(dir.Sub(f.name));
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    const int64_t n = static_cast<int64_t>(values.size());
    for (int64_t world = 1; world <= 5; ++world) {
      std::vector<int64_t> joined;
      for (int64_t rank = 0; rank < world; ++rank) {
        const int64_t b = n * rank / world, e = n * (rank + 1) / world;
        auto part = ReadNpyRangeAsInt64(*map, b, e);
        ASSERT_TRUE(part.ok()) << part.status().ToString();
        EXPECT_EQ(*part, std::vector<int64_t>(whole->begin() + b, whole->begin() + e))
            << f.name << " rank " << rank << " of " << world;
        joined.insert(joined.end(), part->begin(), part->end());
      }
      EXPECT_EQ(joined, *whole) << f.name << " over " << world << " ranks";
    }
    for (const auto& [b, e] : std::vector<std::pair<int64_t, int64_t>>{{-1, 3}, {5, 4}, {0, 47}}) {
      auto bad = ReadNpyRangeAsInt64(*map, b, e);
      EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << b << ", " << e;
      EXPECT_NE(bad.status().message().find("asked of an array of 46"), std::string::npos)
          << bad.status().ToString();
    }
  }
  float x[2] = {1, 2};
  ASSERT_TRUE(WriteNpy(dir.Sub("f.npy"), NpyDtype::kFloat32, {2}, x).ok());
  auto floats = MappedNpy::Open(dir.Sub("f.npy"));
  ASSERT_TRUE(floats.ok());
  EXPECT_EQ(ReadNpyRangeAsInt64(*floats, 0, 1).status().code(), StatusCode::kInvalidArgument);
}

// The last rows of a 16 GiB id file (a sparse file: a header and a hole) are read without the
// rest: nothing else is touched, so this takes no time and no memory.
TEST(Npy, RangeReadOfAHugeSparseFileTouchesOnlyTheRange) {
  testing::TempDir dir;
  const int64_t n = int64_t{1} << 31;
  const std::string header = EncodeNpyHeader(NpyDtype::kInt64, {n});
  const std::string path = dir.Sub("ids.npy");
  {
    std::ofstream out(path, std::ios::binary);
    out << header;
  }
  std::filesystem::resize_file(path, header.size() + static_cast<size_t>(n) * 8);
  auto map = MappedNpy::Open(path);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  auto tail = ReadNpyRangeAsInt64(*map, n - 5, n);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(*tail, std::vector<int64_t>(5, 0));
}

TEST(Npy, RejectsBadFilesWithTheirName) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("text.npy"), std::string("hello world, not numpy")).ok());
  auto a = MappedNpy::Open(dir.Sub("text.npy"));
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("text.npy"), std::string::npos);
  EXPECT_NE(a.status().message().find("not an .npy"), std::string::npos);

  EXPECT_EQ(MappedNpy::Open(dir.Sub("missing.npy")).status().code(), StatusCode::kNotFound);

  // Truncated: header says 2x3 float32 (24 bytes) but only 8 follow.
  std::string h = EncodeNpyHeader(NpyDtype::kFloat32, {2, 3});
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("short.npy"), h + std::string(8, '\0')).ok());
  auto t = MappedNpy::Open(dir.Sub("short.npy"));
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(t.status().message().find("truncated"), std::string::npos);

  // Fortran order and unsupported dtype.
  std::string f = h;
  f.replace(f.find("False"), 5, "True ");
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("fortran.npy"), f + std::string(24, '\0')).ok());
  auto fo = MappedNpy::Open(dir.Sub("fortran.npy"));
  EXPECT_EQ(fo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fo.status().message().find("Fortran"), std::string::npos);

  std::string c = h;
  c.replace(c.find("<f4"), 3, "<c8");
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("complex.npy"), c + std::string(48, '\0')).ok());
  auto co = MappedNpy::Open(dir.Sub("complex.npy"));
  EXPECT_EQ(co.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(co.status().message().find("unsupported dtype '<c8'"), std::string::npos);
}

// A version-1.0 file with `dict` as its header (padded like numpy does) followed by `data_bytes`
// zero bytes.
std::string NpyWithDict(const std::string& dict, size_t data_bytes) {
  std::string padded = dict;
  padded.append((64 - (10 + padded.size() + 1) % 64) % 64, ' ');
  padded.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(padded.size() & 0xff));
  out.push_back(static_cast<char>(padded.size() >> 8));
  return out + padded + std::string(data_bytes, '\0');
}

TEST(Npy, RejectsMalformedHeadersWithoutThrowing) {
  testing::TempDir dir;
  struct Case {
    const char* file;
    std::string shape;  // the value of 'shape' in the dict, verbatim
    size_t data_bytes;
    StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"empty.npy", "", 64, StatusCode::kInvalidArgument, "not a parenthesised tuple"},
      {"unclosed.npy", "3, 4", 64, StatusCode::kInvalidArgument, "not a parenthesised tuple"},
      {"word.npy", "(3, four)", 64, StatusCode::kInvalidArgument,
       "dimension 'four' is not an integer"},
      {"float.npy", "(3.5,)", 64, StatusCode::kInvalidArgument,
       "dimension '3.5' is not an integer"},
      {"hole.npy", "(3,,4)", 64, StatusCode::kInvalidArgument, "empty dimension"},
      {"comma.npy", "(,)", 64, StatusCode::kInvalidArgument, "empty dimension"},
      {"negative.npy", "(-1, 4)", 64, StatusCode::kInvalidArgument, "negative dimension -1"},
      {"huge_dim.npy", "(99999999999999999999,)", 64, StatusCode::kInvalidArgument, "is too large"},
      // 2^32 x 2^32 float32 = 2^66 bytes: the product must not wrap around to something small.
      {"overflow.npy", "(4294967296, 4294967296)", 64, StatusCode::kInvalidArgument,
       "overflows a 64-bit byte count"},
      {"overflow0.npy", "(0, 4294967296, 4294967296)", 64, StatusCode::kInvalidArgument,
       "overflows a 64-bit byte count"},
      // Representable, but far more than the 64 bytes the file holds.
      {"too_big.npy", "(1073741824, 1073741824)", 64, StatusCode::kDataLoss, "truncated"},
      {"short.npy", "(3, 6)", 64, StatusCode::kDataLoss,
       "promises 72 bytes of data but the file holds 64"},
  };
  for (const Case& c : cases) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + c.shape + ", }";
    ASSERT_TRUE(WriteFileAtomically(dir.Sub(c.file), NpyWithDict(dict, c.data_bytes)).ok());
    auto m = MappedNpy::Open(dir.Sub(c.file));
    ASSERT_FALSE(m.ok()) << c.file;
    EXPECT_EQ(m.status().code(), c.code) << c.file << ": " << m.status().ToString();
    EXPECT_NE(m.status().message().find(dir.Sub(c.file)), std::string::npos)
        << m.status().ToString();
    EXPECT_NE(m.status().message().find(c.message), std::string::npos) << m.status().ToString();
    // The readers built on MappedNpy report the same instead of allocating or throwing.
    EXPECT_EQ(ReadNpy(dir.Sub(c.file)).status().code(), c.code) << c.file;
    EXPECT_EQ(ReadNpyAsFloat32(dir.Sub(c.file)).status().code(), c.code) << c.file;
  }

  // Missing keys and an unquoted dtype.
  const std::pair<const char*, std::string> dicts[] = {
      {"no_shape.npy", "{'descr': '<f4', 'fortran_order': False, }"},
      {"no_order.npy", "{'descr': '<f4', 'shape': (2,), }"},
      {"no_descr.npy", "{'fortran_order': False, 'shape': (2,), }"},
      {"shape_last.npy", "{'descr': '<f4', 'fortran_order': False, 'shape':"},
  };
  for (const auto& [file, dict] : dicts) {
    ASSERT_TRUE(WriteFileAtomically(dir.Sub(file), NpyWithDict(dict, 8)).ok());
    auto m = MappedNpy::Open(dir.Sub(file));
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument)
        << file << ": " << m.status().ToString();
    EXPECT_NE(m.status().message().find("malformed .npy header dict"), std::string::npos)
        << m.status().ToString();
  }
  ASSERT_TRUE(
      WriteFileAtomically(dir.Sub("bare.npy"),
                          NpyWithDict("{'descr': <f4, 'fortran_order': False, 'shape': (2,), }", 8))
          .ok());
  auto bare = MappedNpy::Open(dir.Sub("bare.npy"));
  EXPECT_EQ(bare.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bare.status().message().find("must be a quoted dtype string"), std::string::npos)
      << bare.status().ToString();

  // Well-formed variants still parse: a 1-d tuple with its trailing comma, spaces, a scalar and
  // an empty array whose other dimension is large.
  const std::pair<std::string, std::vector<int64_t>> good[] = {
      {"(2,)", {2}}, {"( 1 , 2 )", {1, 2}}, {"()", {}}, {"(0, 4294967296)", {0, 4294967296}}};
  for (const auto& [shape, dims] : good) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    ASSERT_TRUE(WriteFileAtomically(dir.Sub("good.npy"), NpyWithDict(dict, 8)).ok());
    auto m = MappedNpy::Open(dir.Sub("good.npy"));
    ASSERT_TRUE(m.ok()) << shape << ": " << m.status().ToString();
    EXPECT_EQ(m->header().shape, dims) << shape;
  }
}

TEST(Npy, HalfConversionKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties to even -> 1.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // Every half round-trips.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << h;
  }
}

}  // namespace
}  // namespace mlcd
