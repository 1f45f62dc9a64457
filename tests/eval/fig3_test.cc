// The Fig. 3 quantities against a brute-force computation: mean cosine over (sample,
// positive centre) pairs and over (sample, every other centre) pairs; and the reading of a
// checkpoint's class-centre ranges.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/npy.h"
#include "tests/testing/process.h"
#include "worker/eval/runner.h"

namespace mlcd::worker {
namespace {

TEST(Fig3Test, MeansMatchBruteForce) {
  std::mt19937_64 rng(4);
  std::normal_distribution<float> g(0, 1);
  const int64_t n = 50, d = 7, k = 13;
  const int l = 3;
  FeatureMatrix e(n, d), w(k, d);
  for (float& v : e.values) v = g(rng);
  for (float& v : w.values) v = 3 * g(rng);  // centres need not be normalised
  L2NormalizeRows(&e);
  std::vector<int32_t> labels(n * l);
  for (int64_t i = 0; i < n; ++i) {
    labels[i * l] = static_cast<int32_t>(rng() % k);
    labels[i * l + 1] = static_cast<int32_t>(rng() % k);  // may repeat the first: counted once
    labels[i * l + 2] = i % 5 == 0 ? -1 : static_cast<int32_t>(rng() % k);  // padding
  }
  double pos = 0, neg = 0;
  MeanPositiveNegativeCosine(e, labels, l, w, &pos, &neg);
  double pos_sum = 0, neg_sum = 0;
  int64_t pos_n = 0, neg_n = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      double dot = 0, wn = 0;
      for (int64_t j = 0; j < d; ++j) {
        dot += static_cast<double>(e.row(i)[j]) * w.row(c)[j];
        wn += static_cast<double>(w.row(c)[j]) * w.row(c)[j];
      }
      double cosine = dot / std::sqrt(wn);
      bool positive = false;
      for (int j = 0; j < l; ++j) positive |= labels[i * l + j] == c;
      if (positive) {
        pos_sum += cosine;
        ++pos_n;
      } else {
        neg_sum += cosine;
        ++neg_n;
      }
    }
  }
  EXPECT_NEAR(pos, pos_sum / pos_n, 1e-6);
  EXPECT_NEAR(neg, neg_sum / neg_n, 1e-6);
}

TEST(Fig3Test, ReadsEveryClassCentreRangeInOrder) {
  testing::TempDir dir;
  float a[2 * 3] = {1, 2, 3, 4, 5, 6}, b[1 * 3] = {7, 8, 9};
  ASSERT_TRUE(WriteNpy(dir.Sub("class_centres.000000000002-000000000003.weight.npy"),
                       NpyDtype::kFloat32, {1, 3}, b)
                  .ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("class_centres.000000000000-000000000002.weight.npy"),
                       NpyDtype::kFloat32, {2, 3}, a)
                  .ok());
  auto m = ReadCheckpointClassCentres(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->rows, 3);
  ASSERT_EQ(m->cols, 3);
  EXPECT_EQ(m->values, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // A gap in the ranges is an error, as is a directory without centres.
  testing::TempDir gap;
  ASSERT_TRUE(WriteNpy(gap.Sub("class_centres.000000000001-000000000002.weight.npy"),
                       NpyDtype::kFloat32, {1, 3}, b)
                  .ok());
  EXPECT_EQ(ReadCheckpointClassCentres(gap.path()).status().code(), StatusCode::kInvalidArgument);
  testing::TempDir empty;
  EXPECT_EQ(ReadCheckpointClassCentres(empty.path()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlcd::worker
