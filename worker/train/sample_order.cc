#include "worker/train/sample_order.h"

#include <algorithm>
#include <string>

#include "common/random.h"

namespace mlcd::worker {

uint64_t HashValues(std::initializer_list<uint64_t> values) {
  uint64_t h = 0x6A09E667F3BCC909ull;
  for (uint64_t v : values) h = Mix64(h ^ Mix64(v + 0x9E3779B97F4A7C15ull));
  return h;
}

int64_t StepsPerEpoch(int64_t num_samples, int64_t global_batch_size, int64_t max_steps_per_epoch) {
  if (global_batch_size <= 0) return 0;
  int64_t steps = num_samples / global_batch_size;
  if (max_steps_per_epoch > 0) steps = std::min(steps, max_steps_per_epoch);
  return steps;
}

std::vector<int64_t> EpochPermutation(uint64_t seed, int round, int epoch, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  // The unbiased draw (Lemire with rejection): the order is the same on every machine.
  SplitMix rng(HashValues({seed, 0x5045524Dull /* "PERM" */, static_cast<uint64_t>(round),
                           static_cast<uint64_t>(epoch)}));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i + 1)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

namespace {

// The pseudo-label order of an epoch (options validated), seeded by (seed, round).
StatusOr<PseudoLabelOrder> EpochPseudoLabelOrder(const ScheduleOptions& o, int epoch) {
  PseudoLabelOrderOptions po;
  po.global_batch_size = o.global_batch_size;
  po.seed = HashValues({o.seed, 0x4D434Cull /* "MCL" */, static_cast<uint64_t>(o.round)});
  po.epoch = epoch;
  return PseudoLabelOrder::Make(*o.pseudo_labels, po);
}

}  // namespace

int64_t ScheduleStepsPerEpoch(const ScheduleOptions& o) {
  if (!o.pseudo_labels)
    return StepsPerEpoch(o.num_samples, o.global_batch_size, o.max_steps_per_epoch);
  if (static_cast<int64_t>(o.pseudo_labels->size()) != o.num_samples || o.num_samples < 1 ||
      o.global_batch_size < 1)
    return 0;
  // Every epoch has the same number of batches: sum over groups of ceil(size / B).
  StatusOr<PseudoLabelOrder> order = EpochPseudoLabelOrder(o, 0);
  if (!order.ok()) return 0;
  int64_t steps = order->num_batches();
  if (o.max_steps_per_epoch > 0) steps = std::min(steps, o.max_steps_per_epoch);
  return steps;
}

Status ValidateSchedule(const ScheduleOptions& o) {
  if (o.pseudo_labels && static_cast<int64_t>(o.pseudo_labels->size()) != o.num_samples) {
    return Status::InvalidArgument(std::to_string(o.pseudo_labels->size()) + " pseudo-labels for " +
                                   std::to_string(o.num_samples) +
                                   " training samples; there must be one per sample");
  }
  if (o.world_size < 1) return Status::InvalidArgument("world size must be >= 1");
  if (o.rank < 0 || o.rank >= o.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) +
                                   " is outside [0, world size " + std::to_string(o.world_size) +
                                   ")");
  }
  if (o.global_batch_size < 1) return Status::InvalidArgument("training.batch_size must be >= 1");
  if (o.global_batch_size % o.world_size != 0) {
    return Status::InvalidArgument("training.batch_size (" + std::to_string(o.global_batch_size) +
                                   ") must be divisible by the world size (" +
                                   std::to_string(o.world_size) +
                                   "): every rank takes an equal share of the global batch");
  }
  if (o.num_samples < o.global_batch_size) {
    return Status::InvalidArgument("the dataset has " + std::to_string(o.num_samples) +
                                   " training images, fewer than one global batch (" +
                                   std::to_string(o.global_batch_size) +
                                   "); lower training.batch_size");
  }
  if (o.first_epoch < 0 || o.end_epoch < o.first_epoch) {
    return Status::InvalidArgument("epochs [" + std::to_string(o.first_epoch) + ", " +
                                   std::to_string(o.end_epoch) + ") are not a valid range");
  }
  const int64_t spe = ScheduleStepsPerEpoch(o);
  if (o.first_step < 0 || (o.first_step > 0 && o.first_step >= spe)) {
    return Status::InvalidArgument("first step " + std::to_string(o.first_step) +
                                   " is outside the epoch's " + std::to_string(spe) + " steps");
  }
  return Status::Ok();
}

BatchSchedule::BatchSchedule(const ScheduleOptions& options)
    : options_(options), steps_per_epoch_(ScheduleStepsPerEpoch(options)) {}

int64_t BatchSchedule::num_batches() const {
  const int64_t epochs = options_.end_epoch - options_.first_epoch;
  if (epochs <= 0) return 0;
  return std::max<int64_t>(0, epochs * steps_per_epoch_ - options_.first_step);
}

StepPosition BatchSchedule::Position(int64_t index) const {
  const int64_t absolute = options_.first_step + index;
  StepPosition p;
  p.round = options_.round;
  p.epoch = options_.first_epoch + static_cast<int>(absolute / steps_per_epoch_);
  p.step_in_epoch = absolute % steps_per_epoch_;
  return p;
}

void BatchSchedule::LocalIds(int64_t index, std::vector<int64_t>* ids) {
  const StepPosition p = Position(index);
  if (options_.pseudo_labels) {
    if (p.epoch != cached_epoch_) {
      // Validated options make a valid order (ValidateSchedule).
      StatusOr<PseudoLabelOrder> order = EpochPseudoLabelOrder(options_, p.epoch);
      pseudo_order_.emplace(std::move(order.value()));
      cached_epoch_ = p.epoch;
    }
    *ids = pseudo_order_->RankShare(p.step_in_epoch, options_.world_size, options_.rank);
    return;
  }
  if (p.epoch != cached_epoch_) {
    permutation_ = EpochPermutation(options_.seed, options_.round, p.epoch, options_.num_samples);
    cached_epoch_ = p.epoch;
  }
  const int64_t local = local_batch_size();
  const int64_t begin = p.step_in_epoch * options_.global_batch_size + options_.rank * local;
  ids->assign(permutation_.begin() + begin, permutation_.begin() + begin + local);
}

}  // namespace mlcd::worker
