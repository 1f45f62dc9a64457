// Feature-aware negative sampling (MCL, appendix A.1, Algorithm 1): an epoch's order of the
// samples in which every global batch holds samples of one pseudo-label only, so an anchor's
// negatives share its pseudo-label (the concatenation of its cluster ids from every earlier
// stage) and a feature the earlier stages learned cannot tell them apart.
//
// The order of epoch e (a pure function of the pseudo-labels, the batch size, the seed and e):
//   * the samples are grouped by pseudo-label; each group is shuffled (Fisher-Yates over
//     SplitMix64/Lemire draws seeded by (seed, e, pseudo-label): the same on every machine);
//   * the groups are visited in turn, in an order shuffled by (seed, e): group k = j mod C for
//     batch index j, skipping groups already traversed;
//   * a visit takes the next min(B, untraversed) samples of its group as one global batch. A
//     group smaller than B, and the last part of a larger one, make a batch of fewer than B
//     samples: batches are never filled up from another group, since that would bring in
//     negatives of another pseudo-label;
//   * the epoch ends when every sample has been in exactly one batch.
// Rank p of W takes the contiguous share [floor(s·p/W), floor(s·(p+1)/W)) of a global batch of
// s samples (common/even_split.h): shares are disjoint and cover the batch; a batch of fewer
// than W samples leaves some ranks an empty share (the gathered losses take ranks with no
// rows, worker/loss/contrastive_loss.h). A run resumed at step s of the epoch continues with
// batch s of the same order, at any world size. No torch here.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

struct PseudoLabelOrderOptions {
  int64_t global_batch_size = 0;  // B >= 1
  uint64_t seed = 0;
  int epoch = 0;  // >= 0
};

class PseudoLabelOrder {
 public:
  // The order of `pseudo_labels` (one per sample id 0..M-1, any int64 values, M >= 1).
  // INVALID_ARGUMENT for no samples, B < 1 or a negative epoch.
  static StatusOr<PseudoLabelOrder> Make(const std::vector<int64_t>& pseudo_labels,
                                         const PseudoLabelOrderOptions& options);

  // Batches of the epoch (every sample once).
  int64_t num_batches() const { return static_cast<int64_t>(begin_.size()) - 1; }
  // Distinct pseudo-labels.
  int64_t num_groups() const { return num_groups_; }
  // The sample ids of global batch `step` (0 <= step < num_batches()), all of one pseudo-label.
  std::vector<int64_t> GlobalBatch(int64_t step) const;
  // Rank `rank` of `world`'s share of global batch `step`.
  std::vector<int64_t> RankShare(int64_t step, int world, int rank) const;

 private:
  PseudoLabelOrder() = default;
  std::vector<int64_t> ids_;    // the epoch's samples, batch after batch
  std::vector<int64_t> begin_;  // batch i is ids_[begin_[i], begin_[i + 1])
  int64_t num_groups_ = 0;
};

}  // namespace mlcd::worker
