#include "worker/train/step_budget.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace mlcd::worker {

StepBudget::StepBudget(const StepBudgetOptions& options, std::function<double()> now_seconds)
    : options_(options), now_(std::move(now_seconds)) {
  options_.untimed_steps = std::max<int64_t>(0, options_.untimed_steps);
  options_.timed_steps = std::max<int64_t>(1, options_.timed_steps);
  options_.reserve_fraction = std::clamp(options_.reserve_fraction, 0.0, 0.9);
}

void StepBudget::Start() {
  start_ = now_();
  timing_start_ = start_;
  decided_ = false;
}

int64_t StepBudget::decision_step() const {
  const int64_t room = std::max<int64_t>(1, options_.max_steps - options_.steps_before);
  return std::min(options_.untimed_steps + options_.timed_steps, room);
}

void StepBudget::StepDone(int64_t steps_done) {
  if (steps_done == options_.untimed_steps) timing_start_ = now_();
  if (steps_done == decision_step()) {
    decided_at_time_ = now_();
    decided_ = true;
  }
}

double StepBudget::seconds_per_step() const {
  const int64_t timed = decision_step() - options_.untimed_steps;
  if (!decided_ || timed <= 0) return 0;
  return std::max(0.0, decided_at_time_ - timing_start_) / static_cast<double>(timed);
}

int64_t StepBudget::Decide() const {
  const int64_t done = options_.steps_before + decision_step();
  if (done >= options_.max_steps) return options_.max_steps;
  const double per_step = seconds_per_step();
  if (per_step <= 0) return options_.max_steps;
  const double usable = options_.budget_seconds * (1.0 - options_.reserve_fraction);
  const double left = usable - (decided_at_time_ - start_);
  const double more = left > 0 ? std::floor(left / per_step) : 0.0;
  const double total = static_cast<double>(done) + more;
  if (total >= static_cast<double>(options_.max_steps)) return options_.max_steps;
  return std::max<int64_t>(done, static_cast<int64_t>(total));
}

}  // namespace mlcd::worker
