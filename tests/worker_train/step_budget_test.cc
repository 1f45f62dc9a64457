// training.time_budget_minutes: the step count that fits a budget, with a fake clock
// (worker/train/step_budget.h). The trainer's use of it (broadcast, schedule, restart) is in
// train_test.cc.
#include "worker/train/step_budget.h"

#include <gtest/gtest.h>

namespace mlcd::worker {
namespace {

// A clock the test moves: each step takes `per_step` seconds after `setup` seconds.
struct FakeClock {
  double now = 0;
  double operator()() const { return now; }
};

TEST(StepBudgetTest, FitsTheBudgetFromTheTimedSteps) {
  FakeClock clock;
  StepBudgetOptions o;
  o.budget_seconds = 600;
  o.max_steps = 100000;
  o.untimed_steps = 2;
  o.timed_steps = 8;
  o.reserve_fraction = 0.03;
  StepBudget budget(o, [&clock] { return clock(); });
  clock.now = 100;  // the run's start
  budget.Start();
  EXPECT_EQ(budget.decision_step(), 10);
  // Two slow first steps (5 s each), then 1.5 s per step.
  for (int64_t n = 1; n <= budget.decision_step(); ++n) {
    clock.now += n <= 2 ? 5.0 : 1.5;
    budget.StepDone(n);
  }
  EXPECT_DOUBLE_EQ(budget.seconds_per_step(), 1.5);
  // 582 usable seconds, 22 spent in 10 steps: 560 / 1.5 = 373 more.
  EXPECT_EQ(budget.Decide(), 10 + 373);
}

TEST(StepBudgetTest, CapsAtTheRoundsEpochsAndNeverUndoesStepsTaken) {
  FakeClock clock;
  StepBudgetOptions o;
  o.budget_seconds = 60;
  o.max_steps = 50;
  o.untimed_steps = 1;
  o.timed_steps = 4;
  o.reserve_fraction = 0;
  {
    StepBudget fast(o, [&clock] { return clock(); });
    fast.Start();
    for (int64_t n = 1; n <= fast.decision_step(); ++n) {
      clock.now += 0.1;
      fast.StepDone(n);
    }
    EXPECT_EQ(fast.Decide(), 50);  // 600 steps would fit; the epochs allow 50
  }
  {
    StepBudget slow(o, [&clock] { return clock(); });
    slow.Start();
    for (int64_t n = 1; n <= slow.decision_step(); ++n) {
      clock.now += 30;  // the budget is spent before the decision
      slow.StepDone(n);
    }
    EXPECT_EQ(slow.Decide(), 5);  // the steps already taken
  }
}

TEST(StepBudgetTest, AResumedRunCountsTheRoundsEarlierSteps) {
  FakeClock clock;
  StepBudgetOptions o;
  o.budget_seconds = 100;
  o.steps_before = 40;
  o.max_steps = 1000;
  o.untimed_steps = 0;
  o.timed_steps = 5;
  o.reserve_fraction = 0;
  StepBudget budget(o, [&clock] { return clock(); });
  budget.Start();
  for (int64_t n = 1; n <= budget.decision_step(); ++n) {
    clock.now += 2;
    budget.StepDone(n);
  }
  // 40 earlier + 5 timed + (100 - 10) / 2 more.
  EXPECT_EQ(budget.Decide(), 40 + 5 + 45);
  // Near the cap the decision comes early: only 3 steps of room.
  o.steps_before = 997;
  StepBudget near_end(o, [&clock] { return clock(); });
  EXPECT_EQ(near_end.decision_step(), 3);
}

}  // namespace
}  // namespace mlcd::worker
