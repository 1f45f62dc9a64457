// The learning-rate schedule (worker/train/lr_schedule.h): warm-up then cosine, worked by hand.
#include <gtest/gtest.h>

#include "worker/train/lr_schedule.h"

namespace mlcd::worker {
namespace {

TEST(LrScheduleTest, WarmupThenCosineByHand) {
  LrScheduleOptions o;
  o.peak_lr = 1.0;
  o.warmup_fraction = 0.1;
  o.total_steps = 100;
  EXPECT_EQ(WarmupSteps(o), 10);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 9), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 10), 1.0);
  EXPECT_NEAR(LearningRateAt(o, 55), 0.5, 1e-12);  // halfway through the 90 cosine steps
  EXPECT_NEAR(LearningRateAt(o, 100), 0.0, 1e-12);
  EXPECT_NEAR(LearningRateAt(o, 500), 0.0, 1e-12);
  o.decay = LrDecay::kConstant;
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 77), 1.0);
  o.warmup_fraction = 0;
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 0), 1.0);
  EXPECT_FALSE(ParseLrDecay("linear").ok());
}

}  // namespace
}  // namespace mlcd::worker
