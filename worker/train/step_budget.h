// training.time_budget_minutes: how many optimizer steps of a round fit the round's
// wall-clock budget (docs/worker.md, "Time budget"). No torch here.
//
// The gang times its first steps: the first `untimed_steps` of the run are not timed (first
// allocations, caches, the data pipeline filling up); then steps are timed until at least
// `min_timed_steps` are and they took at least `timed_fraction` of the budget (a window long
// enough to average out load changes and short steps). Then the round's step count is
//
//   steps_before + n + floor((budget * (1 - reserve) - elapsed) / seconds_per_step)
//
// clamped to [steps_before + n, max_steps], where n is the steps of this run so far and
// elapsed the time since Start() (the run's set-up counts); the reserve covers checkpoints
// and the end of the run. The count is max_steps when the run reaches it while timing, and
// steps_before + n when the budget is spent while timing. The trainer lets rank 0 decide and
// broadcasts its answer after every timed step, so every rank stops timing at the same step
// (worker/train/trainer.cc).
#pragma once

#include <cstdint>
#include <functional>

namespace mlcd::worker {

struct StepBudgetOptions {
  // The round's budget in seconds (> 0).
  double budget_seconds = 0;
  // Steps of the round done before this run started (a resumed run whose count was not
  // fixed yet); they count towards the round's steps but not towards the timing.
  int64_t steps_before = 0;
  // The most steps the round may have (epochs_per_round epochs).
  int64_t max_steps = 0;
  // First steps of the run that are not timed.
  int64_t untimed_steps = 2;
  // Timing lasts at least this many steps and at least this share of the budget.
  int64_t min_timed_steps = 8;
  double timed_fraction = 0.05;
  // Fraction of the budget kept for checkpoints and the end of the run.
  double reserve_fraction = 0.05;
};

class StepBudget {
 public:
  // `now_seconds`: a monotonic clock in seconds (steady_clock in the product, a fake in tests).
  StepBudget(const StepBudgetOptions& options, std::function<double()> now_seconds);

  // The round's time starts at `start_seconds` (a reading of the clock, e.g. when the run's
  // set-up began).
  void Start(double start_seconds);
  // Call after each step of the run with the steps of this run done so far (1, 2, ...):
  // 0 while timing goes on, else the round's step count (decided; later calls return it).
  int64_t StepDone(int64_t steps_done);
  // The seconds per step measured (0 before the decision or when nothing was timed).
  double seconds_per_step() const { return seconds_per_step_; }
  // Steps of this run after which the count was decided (0 = not yet).
  int64_t decided_at() const { return decided_at_; }

 private:
  int64_t Decide(int64_t steps_done, double now);

  StepBudgetOptions options_;
  std::function<double()> now_;
  double start_ = 0;
  double timing_start_ = 0;
  double seconds_per_step_ = 0;
  int64_t decided_at_ = 0;
  int64_t count_ = 0;
};

}  // namespace mlcd::worker
