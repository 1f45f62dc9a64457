// Which feature rows each rank of the gang owns: rank r holds the contiguous global rows
// [first_row(r), first_row(r) + rows(r)), ranks in order, no gap, every rank the same
// dimension. Gathered once (one all-gather) and checked identically on every rank, so every
// rank returns the same error for a bad layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/even_split.h"
#include "common/status.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker::cluster {

struct GangLayout {
  int64_t total_rows = 0;
  int64_t d = 0;
  std::vector<int64_t> first_row;  // per rank
  std::vector<int64_t> rows;       // per rank
};

// The rows of rank r of `world` when `total` rows are split evenly (common/even_split.h).
using ::mlcd::EvenSplitBegin;

// INVALID_ARGUMENT naming the ranks and numbers when the ranks' rows are not contiguous in
// rank order or their dimensions differ; the collective's error when it fails.
StatusOr<GangLayout> GatherLayout(const at::Tensor& rows, int64_t first_row, Collectives& comm);

// One int64 per rank, gathered: out[r] = the value of rank r.
StatusOr<std::vector<int64_t>> GatherCounts(int64_t value, const at::TensorOptions& device,
                                            Collectives& comm);

}  // namespace mlcd::worker::cluster
