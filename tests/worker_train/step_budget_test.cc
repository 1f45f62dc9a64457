// training.time_budget_minutes: the step count that fits a budget, with a fake clock
// (worker/train/step_budget.h). The trainer's use of it (broadcast, schedule, restart) is in
// train_test.cc.
#include "worker/train/step_budget.h"

#include <gtest/gtest.h>

#include <functional>

namespace mlcd::worker {
namespace {

// Runs steps of `seconds(n)` each (n = 1, 2, ...) on a fake clock until the budget decides;
// returns the count and sets *decided_at.
int64_t RunUntilDecided(StepBudget* budget, double* now,
                        const std::function<double(int64_t)>& seconds, int64_t* decided_at) {
  for (int64_t n = 1; n < 1000000; ++n) {
    *now += seconds(n);
    const int64_t count = budget->StepDone(n);
    if (count > 0) {
      *decided_at = n;
      EXPECT_EQ(budget->StepDone(n + 1), count);  // fixed from now on
      return count;
    }
  }
  return 0;
}

TEST(StepBudgetTest, TimesAWindowOfTheBudgetThenFitsTheRest) {
  double now = 100;
  StepBudgetOptions o;
  o.budget_seconds = 600;
  o.max_steps = 100000;
  o.untimed_steps = 2;
  o.min_timed_steps = 8;
  o.timed_fraction = 0.05;  // 30 s
  o.reserve_fraction = 0.03;
  StepBudget budget(o, [&now] { return now; });
  budget.Start(95);  // the set-up began 5 s before the first step
  int64_t at = 0;
  // Two slow first steps (5 s each, untimed), then 1.5 s per step: 20 timed steps make 30 s.
  const int64_t count = RunUntilDecided(
      &budget, &now, [](int64_t n) { return n <= 2 ? 5.0 : 1.5; }, &at);
  EXPECT_EQ(at, 22);
  EXPECT_EQ(budget.decided_at(), 22);
  EXPECT_DOUBLE_EQ(budget.seconds_per_step(), 1.5);
  // 582 usable seconds, 5 + 10 + 30 = 45 spent: 537 / 1.5 = 358 more.
  EXPECT_EQ(count, 22 + 358);
}

TEST(StepBudgetTest, ShortStepsAreTimedForTheWholeWindow) {
  double now = 0;
  StepBudgetOptions o;
  o.budget_seconds = 60;
  o.max_steps = 1000000;
  o.untimed_steps = 0;
  o.reserve_fraction = 0;
  StepBudget budget(o, [&now] { return now; });
  budget.Start(0);
  int64_t at = 0;
  // 62.5 ms steps: 8 steps would be 0.5 s; the window is 3 s = 48 steps, then 57 s / 62.5 ms.
  const int64_t count = RunUntilDecided(
      &budget, &now, [](int64_t) { return 0.0625; }, &at);
  EXPECT_EQ(at, 48);
  EXPECT_EQ(count, 48 + 912);
}

TEST(StepBudgetTest, CapsAtTheRoundsEpochsAndNeverUndoesStepsTaken) {
  double now = 0;
  StepBudgetOptions o;
  o.budget_seconds = 60;
  o.max_steps = 50;
  o.untimed_steps = 1;
  o.min_timed_steps = 4;
  o.reserve_fraction = 0;
  int64_t at = 0;
  {
    StepBudget fast(o, [&now] { return now; });
    fast.Start(now);
    EXPECT_EQ(RunUntilDecided(
                  &fast, &now, [](int64_t) { return 0.125; }, &at),
              50);
    EXPECT_EQ(at, 25);  // 3 s of timing after the untimed step; 480 steps would fit
  }
  {
    o.max_steps = 20;
    StepBudget capped(o, [&now] { return now; });
    capped.Start(now);
    EXPECT_EQ(RunUntilDecided(
                  &capped, &now, [](int64_t) { return 0.125; }, &at),
              20);
    EXPECT_EQ(at, 20);  // the cap came before the end of the window
  }
  {
    o.max_steps = 50;
    StepBudget slow(o, [&now] { return now; });
    slow.Start(now);
    // The budget is spent before the window ends: the steps already taken.
    EXPECT_EQ(RunUntilDecided(
                  &slow, &now, [](int64_t) { return 30.0; }, &at),
              2);
    EXPECT_EQ(at, 2);
  }
}

TEST(StepBudgetTest, AResumedRunCountsTheRoundsEarlierSteps) {
  double now = 0;
  StepBudgetOptions o;
  o.budget_seconds = 100;
  o.steps_before = 40;
  o.max_steps = 1000;
  o.untimed_steps = 0;
  o.min_timed_steps = 5;
  o.reserve_fraction = 0;
  StepBudget budget(o, [&now] { return now; });
  budget.Start(0);
  int64_t at = 0;
  // 2 s steps: 5 steps (10 s) cover the 5 s window; 40 earlier + 5 + (100 - 10) / 2 more.
  EXPECT_EQ(RunUntilDecided(
                &budget, &now, [](int64_t) { return 2.0; }, &at),
            40 + 5 + 45);
  EXPECT_EQ(at, 5);
}

}  // namespace
}  // namespace mlcd::worker
