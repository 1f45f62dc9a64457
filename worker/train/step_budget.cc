#include "worker/train/step_budget.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace mlcd::worker {

StepBudget::StepBudget(const StepBudgetOptions& options, std::function<double()> now_seconds)
    : options_(options), now_(std::move(now_seconds)) {
  options_.untimed_steps = std::max<int64_t>(0, options_.untimed_steps);
  options_.min_timed_steps = std::max<int64_t>(1, options_.min_timed_steps);
  options_.timed_fraction = std::clamp(options_.timed_fraction, 0.0, 0.5);
  options_.reserve_fraction = std::clamp(options_.reserve_fraction, 0.0, 0.9);
}

void StepBudget::Start(double start_seconds) {
  start_ = start_seconds;
  timing_start_ = start_seconds;
  seconds_per_step_ = 0;
  decided_at_ = 0;
  count_ = 0;
}

int64_t StepBudget::StepDone(int64_t steps_done) {
  if (count_ > 0) return count_;
  const double now = now_();
  if (steps_done == options_.untimed_steps) timing_start_ = now;
  const int64_t timed = steps_done - options_.untimed_steps;
  const bool at_cap = options_.steps_before + steps_done >= options_.max_steps;
  const bool spent = now - start_ >= options_.budget_seconds * (1.0 - options_.reserve_fraction);
  const bool window = timed >= options_.min_timed_steps &&
                      now - timing_start_ >= options_.timed_fraction * options_.budget_seconds;
  if (at_cap || spent || window) return Decide(steps_done, now);
  return 0;
}

int64_t StepBudget::Decide(int64_t steps_done, double now) {
  decided_at_ = steps_done;
  const int64_t timed = steps_done - options_.untimed_steps;
  if (timed > 0)
    seconds_per_step_ = std::max(0.0, now - timing_start_) / static_cast<double>(timed);
  const int64_t done = options_.steps_before + steps_done;
  if (done >= options_.max_steps) return count_ = options_.max_steps;
  if (seconds_per_step_ <= 0) return count_ = std::max<int64_t>(done, 1);
  const double usable = options_.budget_seconds * (1.0 - options_.reserve_fraction);
  const double left = usable - (now - start_);
  const double more = left > 0 ? std::floor(left / seconds_per_step_) : 0.0;
  const double total = static_cast<double>(done) + more;
  if (total >= static_cast<double>(options_.max_steps)) return count_ = options_.max_steps;
  return count_ = std::max<int64_t>(done, static_cast<int64_t>(total));
}

}  // namespace mlcd::worker
