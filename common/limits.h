// Limits that hold across services: a job spec is checked against them before any service
// sees it, and each service enforces the same constant again at its own boundary. Limits of
// one service's requests live with its client library (clients/).
#pragma once

#include <cstdint>

namespace mlcd {

// l: the most labels (nearest centres) per sample a label set keeps.
constexpr int32_t kMaxLabelsPerSample = 1024;

// training.time_budget_minutes: at most a week of training per round.
constexpr double kMaxTimeBudgetMinutes = 7 * 24 * 60;

}  // namespace mlcd
