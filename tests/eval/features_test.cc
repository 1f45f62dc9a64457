// Embedding shard files: names, contiguous parts, round trip, and clear errors.
#include <gtest/gtest.h>

#include <cmath>

#include "common/npy.h"
#include "tests/testing/process.h"
#include "worker/eval/features.h"

namespace mlcd::worker {
namespace {

TEST(EvalFeaturesTest, ContiguousPartsCoverTheSplitInOrder) {
  for (int world : {1, 2, 3, 7}) {
    int64_t expected_begin = 0;
    for (int r = 0; r < world; ++r) {
      int64_t b, e;
      ContiguousPart(1000, r, world, &b, &e);
      EXPECT_EQ(b, expected_begin);
      EXPECT_GE(e, b);
      expected_begin = e;
    }
    EXPECT_EQ(expected_begin, 1000);
  }
}

TEST(EvalFeaturesTest, ShardsRoundTripInRankOrder) {
  testing::TempDir dir;
  const int world = 3;
  const int64_t total = 10, d = 4;
  for (int r = world - 1; r >= 0; --r) {  // written out of order on purpose
    int64_t b, e;
    ContiguousPart(total, r, world, &b, &e);
    FeatureMatrix m(e - b, d);
    std::vector<int64_t> ids, labels;
    for (int64_t i = b; i < e; ++i) {
      for (int64_t j = 0; j < d; ++j) m.row(i - b)[j] = static_cast<float>(i * 10 + j);
      ids.push_back(i);
      labels.push_back(i % 3);
    }
    ASSERT_TRUE(WriteEmbeddingShard(dir.path(), r, world, m, ids, &labels).ok());
  }
  EXPECT_EQ(EmbeddingShardNames(dir.path(), 1, 3).features,
            dir.path() + "/embeddings-00001-of-00003.npy");
  auto loaded = LoadLabelledFeatures({dir.path()});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->features.rows, total);
  ASSERT_EQ(loaded->features.cols, d);
  ASSERT_EQ(loaded->ids.size(), static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    EXPECT_EQ(loaded->ids[i], i);
    EXPECT_EQ(loaded->labels[i], i % 3);
    EXPECT_EQ(loaded->features.row(i)[2], static_cast<float>(i * 10 + 2));
  }
  EXPECT_EQ(NumClassesOf(loaded->labels), 3);
}

TEST(EvalFeaturesTest, NormalizesRows) {
  FeatureMatrix m(2, 2);
  m.values = {3, 4, 0, 0};
  L2NormalizeRows(&m);
  EXPECT_FLOAT_EQ(m.values[0], 0.6f);
  EXPECT_FLOAT_EQ(m.values[1], 0.8f);
  EXPECT_EQ(m.values[2], 0.0f);
}

TEST(EvalFeaturesTest, ErrorsNameTheProblem) {
  testing::TempDir dir;
  auto missing = LoadLabelledFeatures({dir.Sub("nope.npy")});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  // A shard without its labels file.
  float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE(WriteNpy(dir.Sub("a.npy"), NpyDtype::kFloat32, {2, 2}, v).ok());
  auto no_labels = LoadLabelledFeatures({dir.Sub("a.npy")});
  EXPECT_EQ(no_labels.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_labels.status().message().find("a.labels.npy"), std::string::npos);
  // Wrong number of labels.
  int64_t one[1] = {0};
  ASSERT_TRUE(WriteNpy(dir.Sub("a.labels.npy"), NpyDtype::kInt64, {1}, one).ok());
  EXPECT_EQ(LoadLabelledFeatures({dir.Sub("a.npy")}).status().code(), StatusCode::kInvalidArgument);
  // NaN values.
  float bad[4] = {1, NAN, 3, 4};
  int64_t two[2] = {0, 1};
  ASSERT_TRUE(WriteNpy(dir.Sub("b.npy"), NpyDtype::kFloat32, {2, 2}, bad).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("b.labels.npy"), NpyDtype::kInt64, {2}, two).ok());
  auto nan = LoadLabelledFeatures({dir.Sub("b.npy")});
  EXPECT_EQ(nan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nan.status().message().find("NaN"), std::string::npos);
  // Mismatched sizes in a shard write.
  FeatureMatrix m(2, 2);
  EXPECT_EQ(WriteEmbeddingShard(dir.path(), 0, 1, m, {0}, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteEmbeddingShard(dir.path(), 2, 2, m, {0, 1}, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd::worker
