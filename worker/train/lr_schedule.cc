#include "worker/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace mlcd::worker {

StatusOr<LrDecay> ParseLrDecay(const std::string& name) {
  if (name == "cosine" || name.empty()) return LrDecay::kCosine;
  if (name == "constant") return LrDecay::kConstant;
  return Status::InvalidArgument("optimizer.schedule must be \"cosine\" or \"constant\", got \"" +
                                 name + "\"");
}

int64_t WarmupSteps(const LrScheduleOptions& o) {
  if (o.warmup_fraction <= 0 || o.total_steps <= 0) return 0;
  const double w = std::ceil(o.warmup_fraction * static_cast<double>(o.total_steps) - 1e-9);
  return std::min<int64_t>(o.total_steps, static_cast<int64_t>(w));
}

double LearningRateAt(const LrScheduleOptions& o, int64_t step) {
  step = std::max<int64_t>(0, step);
  const int64_t warmup = WarmupSteps(o);
  if (step < warmup) return o.peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (o.decay == LrDecay::kConstant) return o.peak_lr;
  const int64_t span = std::max<int64_t>(1, o.total_steps - warmup);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(span));
  return o.final_lr + (o.peak_lr - o.final_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mlcd::worker
