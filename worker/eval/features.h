// Frozen features for evaluation and re-clustering: an in-memory matrix type and the on-disk
// layout of embedding shards that `mlcd-worker embed` writes (and the linear probe, kNN and
// mlcd-clusterd read).
//
// Shard layout (one set of files per rank of the gang that embedded the split):
//   DIR/embeddings-00000-of-00002.npy         float32 [n_0, d], rows L2-normalised
//   DIR/embeddings-00000-of-00002.ids.npy     int64   [n_0]     sample ids (row index of the split)
//   DIR/embeddings-00000-of-00002.labels.npy  int64   [n_0]     class labels (evaluation only)
//   DIR/embeddings-00001-of-00002.npy         ... rank 1's contiguous part, and so on.
// Rank ρ of W holds rows [N·ρ/W, N·(ρ+1)/W) of the split, so the shards sorted by name are
// the split in order and a shard's global row index equals the sample id (docs/contracts.md).
// mlcd-clusterd reads such a directory directly: its listing skips *.ids.npy and *.labels.npy.
//
// No torch here: this header is cheap to include.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

// A dense, row-major float32 matrix: one row per sample.
struct FeatureMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;  // rows * cols

  FeatureMatrix() = default;
  FeatureMatrix(int64_t r, int64_t c) : rows(r), cols(c), values(static_cast<size_t>(r * c)) {}
  float* row(int64_t i) { return values.data() + i * cols; }
  const float* row(int64_t i) const { return values.data() + i * cols; }
};

// Features with one class label per row (labels in [0, num_classes)).
struct LabelledFeatures {
  FeatureMatrix features;
  std::vector<int64_t> labels;
  // Sample ids of the rows (empty when unknown).
  std::vector<int64_t> ids;
};

// Scales every row to unit L2 norm (rows of norm 0 stay 0).
void L2NormalizeRows(FeatureMatrix* matrix);
void L2NormalizeRows(float* values, int64_t rows, int64_t cols);

// The rows [begin, end) that rank `rank` of `world_size` owns when `total` rows are split
// into contiguous parts: begin = total·rank/world_size, end = total·(rank+1)/world_size.
void ContiguousPart(int64_t total, int rank, int world_size, int64_t* begin, int64_t* end);

// File names of one rank's shard in `dir` (see the layout above).
struct EmbeddingShardFiles {
  std::string features;
  std::string ids;
  std::string labels;
};
EmbeddingShardFiles EmbeddingShardNames(const std::string& dir, int rank, int world_size);

// Writes one rank's shard atomically (features, ids, and labels when `labels` is not null).
// The directory is created when missing. INVALID_ARGUMENT when sizes do not match.
Status WriteEmbeddingShard(const std::string& dir, int rank, int world_size,
                           const FeatureMatrix& features, const std::vector<int64_t>& ids,
                           const std::vector<int64_t>* labels);

// Expands files or directories into feature shard files: a directory contributes its *.npy
// files sorted by name, except *.ids.npy and *.labels.npy. INVALID_ARGUMENT when none.
StatusOr<std::vector<std::string>> ExpandFeatureShards(const std::vector<std::string>& paths);

// Reads feature shards (float16/32/64, 2-d) into one matrix, in order, with their class
// labels: `labels_paths` gives one integer .npy per shard, or a single file covering all
// rows; when empty, each shard's sibling "<shard>.labels.npy" is used. Ids come from
// "<shard>.ids.npy" when present (else ids are left empty). Errors name the file: NOT_FOUND
// for a missing file, INVALID_ARGUMENT for mismatched dimensions or lengths, negative labels
// or NaN/Inf values. With `require_labels` false, shards without a labels file load without
// class labels (labels left empty): features whose rows carry other annotations.
StatusOr<LabelledFeatures> LoadLabelledFeatures(const std::vector<std::string>& paths,
                                                const std::vector<std::string>& labels_paths = {},
                                                bool require_labels = true);

// Number of classes implied by labels (max + 1); 0 for no labels.
int NumClassesOf(const std::vector<int64_t>& labels);

}  // namespace mlcd::worker
