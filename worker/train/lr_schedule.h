// Learning-rate schedule of a job: linear warmup, then cosine decay (or constant), over the
// whole job (all rounds and epochs), indexed by the global optimizer step.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace mlcd::worker {

enum class LrDecay { kCosine, kConstant };

// "cosine" | "constant".
StatusOr<LrDecay> ParseLrDecay(const std::string& name);

struct LrScheduleOptions {
  double peak_lr = 1e-3;
  // Warmup length as a fraction of total_steps (rounded up to whole steps; 0 = none).
  double warmup_fraction = 0.05;
  // Optimizer steps of the whole job.
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::kCosine;
  // Where the cosine ends.
  double final_lr = 0.0;
};

int64_t WarmupSteps(const LrScheduleOptions& options);

// Learning rate of global step `step` (0-based: the step about to be taken):
//   step < W:  peak * (step + 1) / W
//   else:      final + (peak - final) * (1 + cos(pi * (step - W) / max(1, T - W))) / 2  (cosine)
//              peak                                                                 (constant)
// Steps past the end keep the final value.
double LearningRateAt(const LrScheduleOptions& options, int64_t step);

}  // namespace mlcd::worker
