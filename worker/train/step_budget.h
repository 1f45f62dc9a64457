// training.time_budget_minutes: how many optimizer steps of a round fit the round's
// wall-clock budget (docs/worker.md, "Time budget"). No torch here.
//
// The gang times its first steps: the first `untimed_steps` of the run are not timed (first
// allocations, caches, the data pipeline filling up), the next `timed_steps` give the
// seconds per step. After step untimed_steps + timed_steps of the run (the decision step,
// the same on every rank) the round's step count is
//
//   steps_before + decided_at + floor((budget * (1 - reserve) - elapsed) / seconds_per_step)
//
// clamped to [steps_before + decided_at, max_steps], where elapsed is the time since Start()
// (so set-up already spent counts) and the reserve covers checkpoints and the end of the run.
// When the run cannot reach the decision step before max_steps, the count is max_steps. The
// trainer lets rank 0 decide and broadcasts the count (worker/train/trainer.cc).
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
  // Steps timed for the rate.
  int64_t timed_steps = 8;
  // Fraction of the budget kept for checkpoints and the end of the run.
  double reserve_fraction = 0.03;
};

class StepBudget {
 public:
  // `now_seconds`: a monotonic clock in seconds (steady_clock in the product, a fake in tests).
  StepBudget(const StepBudgetOptions& options, std::function<double()> now_seconds);

  // The run starts (before its first step).
  void Start();
  // Steps of this run after which the count is decided (>= 1).
  int64_t decision_step() const;
  // Call after each step of the run with the steps of this run done so far (1, 2, ...).
  void StepDone(int64_t steps_done);
  // The round's step count; valid once StepDone(decision_step()) was called.
  int64_t Decide() const;
  // The seconds per step measured (0 before the decision step or when nothing was timed).
  double seconds_per_step() const;

 private:
  StepBudgetOptions options_;
  std::function<double()> now_;
  double start_ = 0;
  double timing_start_ = 0;
  double decided_at_time_ = 0;
  bool decided_ = false;
};

}  // namespace mlcd::worker
