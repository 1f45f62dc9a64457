#include "common/npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
  std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(117 - dict.size(), ' ') + "\n";
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
