// The deterministic order in which training visits samples (docs/contracts.md, shared by
// the data loader, the label prefetcher, checkpoints and the coordinator):
//   * an epoch e of round r is a permutation of the N sample ids 0..N-1 seeded by
//     (seed, r, e) (Fisher-Yates over SplitMix64/Lemire draws: the same on every machine);
//   * the global batch of step s is permutation[s*B, (s+1)*B) (the last partial batch is
//     dropped; max_steps_per_epoch > 0 caps the steps of an epoch);
//   * rank p of W takes the p-th contiguous B/W ids of the global batch (B % W == 0).
// So a run resumed at (r, e, s) on any world size continues with the same samples.
// Augmentation draws (crop offset, flip) come from (seed, r, e, sample id) alone.
// With pseudo-labels (MCL's stages after the first, docs/mcl.md) the epoch's order is instead
// the feature-aware one of pseudo_label_order.h, seeded by (seed, r): every global batch holds
// one pseudo-label, a group's last batch may be smaller than B, an epoch has
// sum over groups of ceil(size / B) steps (capped by max_steps_per_epoch), and rank p takes
// its contiguous share of each batch (shares of a batch of s samples differ by at most one).
// No torch here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "worker/train/pseudo_label_order.h"

namespace mlcd::worker {

// Hash of a tuple of values (order matters), over common/random.h's Mix64.
uint64_t HashValues(std::initializer_list<uint64_t> values);

// Steps of one epoch: floor(N / B), capped by max_steps_per_epoch when > 0.
int64_t StepsPerEpoch(int64_t num_samples, int64_t global_batch_size, int64_t max_steps_per_epoch);

// The permutation of 0..n-1 of epoch (round, epoch).
std::vector<int64_t> EpochPermutation(uint64_t seed, int round, int epoch, int64_t n);

// Position of one step in the job: round, epoch inside the round, step inside the epoch.
struct StepPosition {
  int round = 0;
  int epoch = 0;
  int64_t step_in_epoch = 0;
};

struct ScheduleOptions {
  uint64_t seed = 0;
  int64_t num_samples = 0;
  int64_t global_batch_size = 0;
  int64_t max_steps_per_epoch = 0;
  int round = 0;
  // Train epochs [first_epoch, end_epoch) of the round, starting at first_step of
  // first_epoch (a resumed run).
  int first_epoch = 0;
  int end_epoch = 1;
  int64_t first_step = 0;
  int rank = 0;
  int world_size = 1;
  // One pseudo-label per sample id (num_samples of them), shared by every copy of the
  // options; null = the permutation order above.
  std::shared_ptr<const std::vector<int64_t>> pseudo_labels;
};

// Steps of one epoch of `options`: StepsPerEpoch, or the pseudo-label order's batches (capped
// by max_steps_per_epoch). 0 for options ValidateSchedule refuses.
int64_t ScheduleStepsPerEpoch(const ScheduleOptions& options);

// INVALID_ARGUMENT when sizes do not fit (B % W, B > N, first_step >= steps per epoch, ...).
Status ValidateSchedule(const ScheduleOptions& options);

// The batches one rank visits, in order. Cheap to copy the options; keeps the permutation of
// the epoch it is in. Not thread-safe (give each thread its own).
class BatchSchedule {
 public:
  explicit BatchSchedule(const ScheduleOptions& options);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Batches this schedule visits in total.
  int64_t num_batches() const;
  // The i-th batch (0 <= i < num_batches()): its position, and this rank's sample ids.
  StepPosition Position(int64_t index) const;
  void LocalIds(int64_t index, std::vector<int64_t>* ids);
  // The share of a full global batch (a pseudo-label order's batches may be smaller).
  int64_t local_batch_size() const { return options_.global_batch_size / options_.world_size; }
  const ScheduleOptions& options() const { return options_; }

 private:
  ScheduleOptions options_;
  int64_t steps_per_epoch_ = 0;
  int cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
  std::optional<PseudoLabelOrder> pseudo_order_;  // with pseudo_labels: cached_epoch_'s order
};

}  // namespace mlcd::worker
