#include "worker/train/pseudo_label_order.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "common/even_split.h"
#include "common/random.h"
#include "worker/train/sample_order.h"

namespace mlcd::worker {
namespace {

// Fisher-Yates with unbiased draws from `rng`: the same order on every machine.
template <typename T>
void Shuffle(std::vector<T>* values, SplitMix* rng) {
  for (size_t i = values->size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng->Below(static_cast<uint64_t>(i)));
    std::swap((*values)[i - 1], (*values)[j]);
  }
}

}  // namespace

StatusOr<PseudoLabelOrder> PseudoLabelOrder::Make(const std::vector<int64_t>& pseudo_labels,
                                                  const PseudoLabelOrderOptions& options) {
  if (pseudo_labels.empty())
    return Status::InvalidArgument("the feature-aware order needs at least one sample");
  if (options.global_batch_size < 1)
    return Status::InvalidArgument("the global batch size must be >= 1, got " +
                                   std::to_string(options.global_batch_size));
  if (options.epoch < 0)
    return Status::InvalidArgument("the epoch must be >= 0, got " + std::to_string(options.epoch));
  // The groups in ascending pseudo-label order, each in ascending sample id before its shuffle.
  std::map<int64_t, std::vector<int64_t>> by_label;
  for (size_t i = 0; i < pseudo_labels.size(); ++i)
    by_label[pseudo_labels[i]].push_back(static_cast<int64_t>(i));
  const uint64_t seed = options.seed, epoch = static_cast<uint64_t>(options.epoch);
  std::vector<std::vector<int64_t>> groups;
  groups.reserve(by_label.size());
  for (auto& [label, members] : by_label) {
    SplitMix rng(
        HashValues({seed, 0x47524F5550ull /* "GROUP" */, epoch, static_cast<uint64_t>(label)}));
    Shuffle(&members, &rng);
    groups.push_back(std::move(members));
  }
  SplitMix visit_rng(HashValues({seed, 0x5649534954ull /* "VISIT" */, epoch}));
  Shuffle(&groups, &visit_rng);

  PseudoLabelOrder order;
  order.num_groups_ = static_cast<int64_t>(groups.size());
  order.ids_.reserve(pseudo_labels.size());
  order.begin_.push_back(0);
  std::vector<size_t> taken(groups.size(), 0);
  size_t remaining = pseudo_labels.size();
  for (size_t j = 0; remaining > 0; ++j) {
    const size_t k = j % groups.size();
    const std::vector<int64_t>& group = groups[k];
    if (taken[k] == group.size()) continue;  // traversed
    const size_t n =
        std::min(group.size() - taken[k], static_cast<size_t>(options.global_batch_size));
    order.ids_.insert(order.ids_.end(), group.begin() + static_cast<std::ptrdiff_t>(taken[k]),
                      group.begin() + static_cast<std::ptrdiff_t>(taken[k] + n));
    taken[k] += n;
    remaining -= n;
    order.begin_.push_back(static_cast<int64_t>(order.ids_.size()));
  }
  return order;
}

std::vector<int64_t> PseudoLabelOrder::GlobalBatch(int64_t step) const {
  return std::vector<int64_t>(ids_.begin() + begin_[static_cast<size_t>(step)],
                              ids_.begin() + begin_[static_cast<size_t>(step) + 1]);
}

std::vector<int64_t> PseudoLabelOrder::RankShare(int64_t step, int world, int rank) const {
  const int64_t b = begin_[static_cast<size_t>(step)];
  const int64_t s = begin_[static_cast<size_t>(step) + 1] - b;
  const int64_t lo = b + EvenSplitBegin(s, world, rank);
  const int64_t hi = b + EvenSplitBegin(s, world, rank + 1);
  return std::vector<int64_t>(ids_.begin() + lo, ids_.begin() + hi);
}

}  // namespace mlcd::worker
