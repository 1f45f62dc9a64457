// k-nearest-neighbour classification on frozen features: the fast check of representation
// quality used next to the linear probe (Wu et al. 2018 / DINO's weighted kNN).
//
// For every query q (L2-normalised), the k training rows with the highest cosine similarity
// s_j vote for their class with weight exp(s_j / T); the class with the largest total wins
// (ties: the lowest class index). Defaults: k = 20, T = 0.07.
//
// Similarities are computed block by block (query block x train block float32 GEMMs), keeping
// a running top-k per query, so memory stays at query_block_rows x train_block_rows floats
// whatever the sizes. 10000 queries against 60000 x 512 training rows is ~0.6 TFLOP, a few
// seconds on 2 cores with OpenBLAS.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker/eval/features.h"

namespace mlcd::worker {

struct KnnOptions {
  // Neighbours per query (clamped to the number of training rows).
  int k = 20;
  // Vote weight exp(similarity / temperature).
  double temperature = 0.07;
  // L2-normalise train and query rows first (so similarities are cosines).
  bool normalize = true;
  // Block sizes of the similarity GEMMs.
  int64_t query_block_rows = 256;
  int64_t train_block_rows = 16384;
  // Number of classes; 0 = max label + 1 over train and query labels.
  int num_classes = 0;
};

struct KnnResult {
  // Fraction of queries whose predicted class equals their label (0 when no query labels).
  double accuracy = 0;
  std::vector<int64_t> predictions;
  int k = 0;  // neighbours actually used
  double seconds = 0;
};

// Classifies every query row. `query_labels` may be empty (no accuracy). INVALID_ARGUMENT when
// dimensions or label counts do not match, labels are negative, k < 1 or T <= 0.
StatusOr<KnnResult> KnnClassify(const FeatureMatrix& train,
                                const std::vector<int64_t>& train_labels,
                                const FeatureMatrix& queries,
                                const std::vector<int64_t>& query_labels,
                                const KnnOptions& options);

}  // namespace mlcd::worker
