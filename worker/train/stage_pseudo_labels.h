// MCL (docs/mcl.md): the pseudo-label of every training sample at stage j >= 1, made from the
// sealed sets of stages 0..j-1 (Assignment.pseudo_label_sets): two samples share one exactly
// when their top-1 clusters agree in every earlier stage (the paper's Eq. 2). The values are
// dense ids 0..G-1 numbered in order of first appearance by sample id, so the same sets give
// the same values on every rank and machine. A sample a set has no row for (an image the
// stage's extraction skipped as unreadable) takes the cluster -1 there: such samples group
// together instead of failing the stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "clients/labelstore_client.h"
#include "common/status.h"

namespace mlcd::worker {

// Reads sample ids [0, num_samples) of every set in `sets` (in stage order, at least one)
// through `client` and combines their top-1 labels. Errors of the label store come back
// naming the set; a set that labels none of the samples is FAILED_PRECONDITION.
StatusOr<std::vector<int64_t>> ReadStagePseudoLabels(const labelstore::LabelStoreClient& client,
                                                     const std::vector<std::string>& sets,
                                                     int64_t num_samples);

// The combination alone: `stages[j][i]` is sample i's top-1 cluster in stage j (-1: none).
// INVALID_ARGUMENT when the stages label different numbers of samples or there are none.
StatusOr<std::vector<int64_t>> CombineStageLabels(const std::vector<std::vector<int64_t>>& stages);

}  // namespace mlcd::worker
