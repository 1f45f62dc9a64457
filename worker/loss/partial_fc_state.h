// The checkpoint form of PartialFc's shard: the class centres, their AdamW moments and row
// steps, by class range, so that a state saved at world size W loads at any W'. PartialFc's
// ImportState / Save / Load (worker/loss/partial_fc.h) are these functions on the layer's own
// tensors. The files of range [begin, end) in a checkpoint directory (begin/end zero-padded
// to 12 digits; each file written atomically, the .json last):
//   class_centres.<begin>-<end>.weight.npy       float32 [n, D]
//   class_centres.<begin>-<end>.exp_avg.npy      float32 [n, D]
//   class_centres.<begin>-<end>.exp_avg_sq.npy   float32 [n, D]
//   class_centres.<begin>-<end>.row_steps.npy    int64 [n]
//   class_centres.<begin>-<end>.json             {"num_classes","embedding_dim","step",
//                                                 "begin","end", options}
// No collectives: every rank reads and writes its own range.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/npy.h"
#include "common/status.h"
#include "worker/loss/partial_fc.h"

namespace mlcd::worker {

// "[d0, d1, ...] <dtype>" ("undefined" for an undefined tensor), for the layer's messages.
std::string TensorShapeString(const at::Tensor& t);

// Copies into `shard` (range, num_classes and embedding_dim set; its tensors are the
// destination, written in place) the rows of `pieces` that fall in shard->range. The pieces
// must have shard's num_classes and embedding_dim, valid ranges, tensors of their range's
// shape (moments and row steps may be undefined: zeros then), one common step, and together
// cover shard->range; INVALID_ARGUMENT otherwise (shard unchanged unless all checks pass).
// Sets shard->step to the pieces' step when there is a piece.
Status AssembleShardState(const std::vector<PartialFcShardState>& pieces,
                          PartialFcShardState* shard);

// Writes `state` (options for the .json's description) into `dir`, which must exist
// (NOT_FOUND otherwise).
Status SaveShardState(const std::string& dir, const PartialFcShardState& state,
                      const PartialFcOptions& options);

// The pieces of a checkpoint directory that overlap `range`, memory-mapped (only those rows
// are read when copied); the tensors point into `maps`, which must outlive them.
struct ShardPieces {
  std::vector<PartialFcShardState> pieces;
  std::vector<MappedNpy> maps;
  int64_t step = -1;  // the directory's step (the same in every range's .json)
};

// Reads every class_centres.*.json of `dir` and maps the files of the ranges overlapping
// `range`. NOT_FOUND when `dir` or its .json files are missing; INVALID_ARGUMENT when the
// ranges disagree on the step or have another num_classes / embedding_dim; DATA_LOSS for
// malformed or truncated files. Coverage is AssembleShardState's check.
StatusOr<ShardPieces> ReadShardPieces(const std::string& dir, ClassRange range, int64_t num_classes,
                                      int64_t embedding_dim);

}  // namespace mlcd::worker
