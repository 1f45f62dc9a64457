// MCL's cross-stage integration (worker/eval/stage_concat.h): the concatenation's width is
// the sum of the stages', each stage's part is its unit row scaled by 1/sqrt(N), so the whole
// row is unit-norm; parts of different row counts are refused.
#include "worker/eval/stage_concat.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mlcd::worker {
namespace {

TEST(StageConcatTest, WidthsAddAndRowsAreUnitNorm) {
  FeatureMatrix a(2, 2), b(2, 3);
  a.values = {3, 4, 0, 2};
  b.values = {1, 0, 0, 0, 0, -5};
  auto all = ConcatenateStageFeatures({a, b});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->rows, 2);
  ASSERT_EQ(all->cols, 5);
  const float s = static_cast<float>(1 / std::sqrt(2.0));
  const std::vector<float> want = {0.6f * s, 0.8f * s, s, 0, 0, 0, s, 0, 0, -s};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(all->values[i], want[i], 1e-6) << i;
  for (int64_t r = 0; r < 2; ++r) {
    double norm = 0;
    for (int64_t c = 0; c < 5; ++c) norm += all->row(r)[c] * all->row(r)[c];
    EXPECT_NEAR(norm, 1.0, 1e-6);
  }
  FeatureMatrix short_part(1, 2);
  auto uneven = ConcatenateStageFeatures({a, short_part});
  EXPECT_NE(uneven.status().message().find("stage 1 has 1 rows, stage 0 2"), std::string::npos);
  EXPECT_EQ(ConcatenateStageFeatures({}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd::worker
