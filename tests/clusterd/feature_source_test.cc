// Feature shard input: directory expansion, conversion, sample ids, and every bad input the
// issue lists rejected with a message naming the file.
#include "clusterd/feature_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "clusterd/assign.h"
#include "clusterd/kmeans.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd::clusterd {
namespace {

std::vector<float> Ramp(int64_t n, int d, float offset = 0) {
  std::vector<float> v(static_cast<size_t>(n) * d);
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + 0.25f * static_cast<float>(i % 97) - 3.0f;
  return v;
}

void WriteF32(const std::string& path, int64_t n, int d, const std::vector<float>& v) {
  ASSERT_TRUE(WriteNpy(path, NpyDtype::kFloat32, {n, d}, v.data()).ok());
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(FeatureShards, DirectoryShardsInNameOrderSkippingIdsAndLabels) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeDirs(dir.Sub("f")).ok());
  WriteF32(dir.Sub("f/b.npy"), 3, 4, Ramp(3, 4, 100));
  WriteF32(dir.Sub("f/a.npy"), 2, 4, Ramp(2, 4));
  std::vector<int64_t> ids = {7, 8};
  ASSERT_TRUE(WriteNpy(dir.Sub("f/a.ids.npy"), NpyDtype::kInt64, {2}, ids.data()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("f/all.labels.npy"), NpyDtype::kInt64, {2}, ids.data()).ok());
  auto fs = FeatureShards::Open({dir.Sub("f")});
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  ASSERT_EQ(fs->num_shards(), 2u);
  EXPECT_EQ(fs->shard_path(0), dir.Sub("f/a.npy"));
  EXPECT_EQ(fs->shard_path(1), dir.Sub("f/b.npy"));
  EXPECT_EQ(fs->rows(), 5);
  EXPECT_EQ(fs->d(), 4);
  EXPECT_EQ(fs->sample_id(3), 3u);
  // Row 2 is the first row of b.npy; unnormalised read returns it verbatim.
  std::vector<float> row(4);
  fs->ReadRows(2, 3, row.data(), /*normalize=*/false);
  std::vector<float> b = Ramp(3, 4, 100);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(row[j], b[j]);
  // Normalised rows have unit norm and the same direction.
  fs->ReadRows(2, 3, row.data());
  double norm = 0, dot = 0, bn = 0;
  for (int j = 0; j < 4; ++j) {
    norm += row[j] * row[j];
    dot += row[j] * b[j];
    bn += b[j] * b[j];
  }
  EXPECT_NEAR(norm, 1.0, 1e-6);
  EXPECT_NEAR(dot, std::sqrt(bn), 1e-3);
}

TEST(FeatureShards, IdsFilesGiveSampleIds) {
  testing::TempDir dir;
  WriteF32(dir.Sub("a.npy"), 2, 3, Ramp(2, 3));
  WriteF32(dir.Sub("b.npy"), 3, 3, Ramp(3, 3));
  std::vector<uint64_t> ia = {100, 5}, ib = {9, 1000000000000ULL, 42};
  ASSERT_TRUE(WriteNpy(dir.Sub("a.ids.npy"), NpyDtype::kUint64, {2}, ia.data()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("b.ids.npy"), NpyDtype::kUint64, {3}, ib.data()).ok());
  auto fs = FeatureShards::Open({dir.Sub("a.npy"), dir.Sub("b.npy")},
                                {dir.Sub("a.ids.npy"), dir.Sub("b.ids.npy")});
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  std::vector<uint64_t> got(5);
  fs->SampleIds(0, 5, got.data());
  EXPECT_EQ(got, (std::vector<uint64_t>{100, 5, 9, 1000000000000ULL, 42}));
}

TEST(FeatureShards, Float16IsConverted) {
  testing::TempDir dir;
  std::vector<uint16_t> h = {FloatToHalf(1.0f), FloatToHalf(-2.0f), FloatToHalf(0.5f),
                             FloatToHalf(3.0f)};
  ASSERT_TRUE(WriteNpy(dir.Sub("h.npy"), NpyDtype::kFloat16, {2, 2}, h.data()).ok());
  auto fs = FeatureShards::Open({dir.Sub("h.npy")});
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  std::vector<float> out(4);
  fs->ReadRows(0, 2, out.data(), false);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
}

// ---- bad input -------------------------------------------------------------------------------

TEST(FeatureShardsBadInput, MissingFileIsNotFound) {
  testing::TempDir dir;
  auto fs = FeatureShards::Open({dir.Sub("nope.npy")});
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(fs.status().message(), dir.Sub("nope.npy")));
}

TEST(FeatureShardsBadInput, NotAnNpy) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("x.npy"), "hello, this is text and not numpy").ok());
  auto fs = FeatureShards::Open({dir.Sub("x.npy")});
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(fs.status().message(), dir.Sub("x.npy")));
  EXPECT_TRUE(Contains(fs.status().message(), "not an .npy"));
}

TEST(FeatureShardsBadInput, UnsupportedDtype) {
  testing::TempDir dir;
  std::vector<double> v(6, 1.0);
  ASSERT_TRUE(WriteNpy(dir.Sub("d.npy"), NpyDtype::kFloat64, {2, 3}, v.data()).ok());
  auto fs = FeatureShards::Open({dir.Sub("d.npy")});
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(fs.status().message(), dir.Sub("d.npy")));
  EXPECT_TRUE(Contains(fs.status().message(), "float64"));
  std::vector<int32_t> iv(6, 1);
  ASSERT_TRUE(WriteNpy(dir.Sub("i.npy"), NpyDtype::kInt32, {2, 3}, iv.data()).ok());
  auto fi = FeatureShards::Open({dir.Sub("i.npy")});
  ASSERT_FALSE(fi.ok());
  EXPECT_TRUE(Contains(fi.status().message(), "int32"));
}

TEST(FeatureShardsBadInput, OneDimensionalArray) {
  testing::TempDir dir;
  std::vector<float> v(6, 1.0f);
  ASSERT_TRUE(WriteNpy(dir.Sub("v.npy"), NpyDtype::kFloat32, {6}, v.data()).ok());
  auto fs = FeatureShards::Open({dir.Sub("v.npy")});
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(fs.status().message(), "2-d"));
}

TEST(FeatureShardsBadInput, FortranOrder) {
  testing::TempDir dir;
  std::string header = EncodeNpyHeader(NpyDtype::kFloat32, {2, 2});
  size_t pos = header.find("False");
  header.replace(pos, 5, "True ");
  std::string data(16, '\0');
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("f.npy"), header + data).ok());
  auto fs = FeatureShards::Open({dir.Sub("f.npy")});
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(fs.status().message(), dir.Sub("f.npy")));
  EXPECT_TRUE(Contains(fs.status().message(), "Fortran"));
}

TEST(FeatureShardsBadInput, TruncatedIsDataLoss) {
  testing::TempDir dir;
  WriteF32(dir.Sub("t.npy"), 10, 8, Ramp(10, 8));
  auto content = ReadFileToString(dir.Sub("t.npy"));
  ASSERT_TRUE(content.ok());
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("t.npy"), content->substr(0, content->size() - 40)).ok());
  auto fs = FeatureShards::Open({dir.Sub("t.npy")});
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(fs.status().message(), dir.Sub("t.npy")));
  EXPECT_TRUE(Contains(fs.status().message(), "truncated"));
}

TEST(FeatureShardsBadInput, MixedDimensions) {
  testing::TempDir dir;
  WriteF32(dir.Sub("a.npy"), 2, 4, Ramp(2, 4));
  WriteF32(dir.Sub("b.npy"), 2, 5, Ramp(2, 5));
  auto fs = FeatureShards::Open({dir.Sub("a.npy"), dir.Sub("b.npy")});
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(fs.status().message(), dir.Sub("b.npy")));
  EXPECT_TRUE(Contains(fs.status().message(), "d = 5"));
  EXPECT_TRUE(Contains(fs.status().message(), "d = 4"));
}

TEST(FeatureShardsBadInput, NanAndInfRowsCountedWithPositions) {
  testing::TempDir dir;
  WriteF32(dir.Sub("good.npy"), 4, 3, Ramp(4, 3));
  std::vector<float> v = Ramp(100, 3);
  v[5 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
  v[17 * 3 + 0] = std::numeric_limits<float>::infinity();
  v[17 * 3 + 2] = -std::numeric_limits<float>::infinity();
  v[99 * 3 + 2] = std::numeric_limits<float>::quiet_NaN();
  WriteF32(dir.Sub("bad.npy"), 100, 3, v);
  auto fs = FeatureShards::Open({dir.Sub("good.npy"), dir.Sub("bad.npy")});
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  Status st = fs->CheckFinite();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(st.message(),
               dir.Sub("bad.npy") + ": 3 of 100 rows contain NaN or Inf values (rows 5, 17, 99)"))
      << st.message();
  EXPECT_FALSE(Contains(st.message(), "good.npy"));
  // float16 NaN too.
  std::vector<uint16_t> h(6, FloatToHalf(1.0f));
  h[4] = 0x7e00;  // NaN
  ASSERT_TRUE(WriteNpy(dir.Sub("h.npy"), NpyDtype::kFloat16, {3, 2}, h.data()).ok());
  auto fh = FeatureShards::Open({dir.Sub("h.npy")});
  ASSERT_TRUE(fh.ok());
  Status sh = fh->CheckFinite();
  EXPECT_TRUE(
      Contains(sh.message(), dir.Sub("h.npy") + ": 1 of 3 rows contain NaN or Inf values (row 2)"))
      << sh.message();
}

TEST(FeatureShardsBadInput, EmptyInputs) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeDirs(dir.Sub("empty")).ok());
  auto e1 = FeatureShards::Open({dir.Sub("empty")});
  ASSERT_FALSE(e1.ok());
  EXPECT_EQ(e1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(e1.status().message(), dir.Sub("empty")));
  EXPECT_TRUE(Contains(e1.status().message(), "no .npy"));

  std::vector<float> none;
  ASSERT_TRUE(WriteNpy(dir.Sub("zero.npy"), NpyDtype::kFloat32, {0, 8}, none.data()).ok());
  auto e2 = FeatureShards::Open({dir.Sub("zero.npy")});
  ASSERT_FALSE(e2.ok());
  EXPECT_EQ(e2.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(e2.status().message(), "empty input"));

  auto e3 = FeatureShards::Open({});
  ASSERT_FALSE(e3.ok());
  EXPECT_EQ(e3.status().code(), StatusCode::kInvalidArgument);
}

TEST(FeatureShardsBadInput, BadIdsFiles) {
  testing::TempDir dir;
  WriteF32(dir.Sub("a.npy"), 3, 2, Ramp(3, 2));
  WriteF32(dir.Sub("b.npy"), 2, 2, Ramp(2, 2));
  std::vector<int64_t> two = {1, 2}, three = {1, 2, 3}, neg = {0, -4, 5};
  ASSERT_TRUE(WriteNpy(dir.Sub("two.npy"), NpyDtype::kInt64, {2}, two.data()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("three.npy"), NpyDtype::kInt64, {3}, three.data()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("neg.npy"), NpyDtype::kInt64, {3}, neg.data()).ok());
  // Wrong count of ids files.
  auto c = FeatureShards::Open({dir.Sub("a.npy"), dir.Sub("b.npy")}, {dir.Sub("three.npy")});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "one ids file per shard"));
  // Wrong length.
  auto l = FeatureShards::Open({dir.Sub("a.npy")}, {dir.Sub("two.npy")});
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(Contains(l.status().message(), dir.Sub("two.npy")));
  EXPECT_TRUE(Contains(l.status().message(), "holds 2 ids"));
  // Negative.
  auto n = FeatureShards::Open({dir.Sub("a.npy")}, {dir.Sub("neg.npy")});
  ASSERT_FALSE(n.ok());
  EXPECT_TRUE(Contains(n.status().message(), "negative sample id -4"));
  // Duplicates across files: ids 1 and 2 appear in both.
  auto d = FeatureShards::Open({dir.Sub("a.npy"), dir.Sub("b.npy")},
                               {dir.Sub("three.npy"), dir.Sub("two.npy")});
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Contains(d.status().message(), "more than once"));
}

TEST(FeatureShardsBadInput, KLargerThanRowsAndLLargerThanK) {
  testing::TempDir dir;
  WriteF32(dir.Sub("a.npy"), 5, 4, Ramp(5, 4));
  auto fs = FeatureShards::Open({dir.Sub("a.npy")});
  ASSERT_TRUE(fs.ok());
  SphericalKMeansParams p;
  p.k = 6;
  auto km = TrainSphericalKMeans(*fs, p);
  ASSERT_FALSE(km.ok());
  EXPECT_EQ(km.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(km.status().message(), "k = 6 is larger than the number of feature rows (5)"));

  std::vector<float> centroids = Ramp(3, 4);
  AssignParams ap;
  ap.l = 4;
  auto as = AssignTopL(*fs, centroids, 3, ap, {}, nullptr);
  ASSERT_FALSE(as.ok());
  EXPECT_EQ(as.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(as.status().message(), "l = 4 is larger than the number of centroids k = 3"));
}

TEST(FeatureShardsBadInput, CentroidFiles) {
  testing::TempDir dir;
  WriteF32(dir.Sub("c5.npy"), 3, 5, Ramp(3, 5));
  int k = 0, d = 0;
  auto wrong_d = LoadCentroids(dir.Sub("c5.npy"), 4, &k, &d);
  ASSERT_FALSE(wrong_d.ok());
  EXPECT_TRUE(
      Contains(wrong_d.status().message(), "centroids have d = 5 but the features have d = 4"));
  std::vector<float> z = Ramp(3, 4);
  for (int j = 0; j < 4; ++j) z[4 + j] = 0;
  WriteF32(dir.Sub("zero.npy"), 3, 4, z);
  auto zero = LoadCentroids(dir.Sub("zero.npy"), 4, &k, &d);
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Contains(zero.status().message(), "centroid row 1 is all zeros"));
  auto ok = LoadCentroids(dir.Sub("c5.npy"), 0, &k, &d);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(k, 3);
  EXPECT_EQ(d, 5);
}

TEST(FeatureShardsBadInput, ClassLabels) {
  testing::TempDir dir;
  std::vector<int64_t> labels = {0, 1, -1};
  ASSERT_TRUE(WriteNpy(dir.Sub("l.npy"), NpyDtype::kInt64, {3}, labels.data()).ok());
  auto wrong_n = ReadClassLabels(dir.Sub("l.npy"), 4);
  ASSERT_FALSE(wrong_n.ok());
  EXPECT_TRUE(
      Contains(wrong_n.status().message(), "holds 3 class labels but the features have 4 rows"));
  auto negative = ReadClassLabels(dir.Sub("l.npy"), 3);
  ASSERT_FALSE(negative.ok());
  EXPECT_TRUE(Contains(negative.status().message(), "negative class label -1 at row 2"));

  // A huge class id is rejected up front instead of sizing per-class counters by it.
  std::vector<int64_t> huge = {0, 1000000000000, 2};
  ASSERT_TRUE(WriteNpy(dir.Sub("huge.npy"), NpyDtype::kInt64, {3}, huge.data()).ok());
  auto too_large = ReadClassLabels(dir.Sub("huge.npy"), 3);
  ASSERT_FALSE(too_large.ok());
  EXPECT_EQ(too_large.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(too_large.status().message(),
                       dir.Sub("huge.npy") + ": class label 1000000000000 at row 1 is "
                                             "too large; class ids must be in [0, 16777216)"))
      << too_large.status().message();
  std::vector<int64_t> edge = {0, kMaxClassId - 1, 2};
  ASSERT_TRUE(WriteNpy(dir.Sub("edge.npy"), NpyDtype::kInt64, {3}, edge.data()).ok());
  EXPECT_TRUE(ReadClassLabels(dir.Sub("edge.npy"), 3).ok());
}

TEST(FeatureShardsBadInput, MalformedHeaderIsAnErrorNotACrash) {
  testing::TempDir dir;
  // An empty 'shape' value used to throw std::out_of_range out of the npy reader.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': , }";
  dict.append(117 - dict.size(), ' ');
  std::string bytes =
      std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + "\n" + std::string(64, '\0');
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("bad.npy"), bytes).ok());
  auto shards = FeatureShards::Open({dir.Sub("bad.npy")});
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(shards.status().message(), dir.Sub("bad.npy") + ": malformed .npy shape"))
      << shards.status().message();
}

}  // namespace
}  // namespace mlcd::clusterd
