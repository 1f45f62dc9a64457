// Top-l assignment on the gang: every rank searches its own rows against all k centroids
// (GEMM + top-l, chunked: nearest.h) and hands each chunk's labels, on the host, to its sink
// (e.g. a label-store writer: label_sink.h). Afterwards the top-1 cluster sizes are reduced
// over ranks (one all-reduce of k int64), so every rank returns the same statistics.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "clients/label_batch.h"
#include "common/status.h"
#include "worker/cluster/nearest.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker::cluster {

struct GangAssignParams {
  // Labels per row, 1 <= l <= k.
  int l = 8;
  SearchOptions search;
};

struct GangAssignStats {
  int64_t rows = 0;                  // over all ranks
  std::vector<int64_t> top1_sizes;   // k, over all ranks
  double seconds = 0;                // this rank's search and sink
};

// Receives this rank's rows in order: `first_row` is the global row of the batch's first row;
// the batch has labels and scores (rows x l, best first) and sample_ids = global row ids.
using GangLabelSink = std::function<Status(int64_t first_row, const labelstore::LabelBatch&)>;

// `rows`: this rank's unit rows (as for TrainGangKMeans), `first_row` its first global row;
// `centroids`: k x d unit rows on the same device. The sink may be empty.
StatusOr<GangAssignStats> AssignGangTopL(const at::Tensor& rows, int64_t first_row,
                                         const at::Tensor& centroids,
                                         const GangAssignParams& params, Collectives& comm,
                                         const GangLabelSink& sink);

}  // namespace mlcd::worker::cluster
