// MCL (docs/mcl.md): what a job's record shows of a stage's clustering, read back from the
// stage's sealed label set once ASSIGNING is done: the sizes of its clusters among the top-1
// labels, and the adjusted mutual information with the previous stage's clustering
// (common/adjusted_mutual_info.h; the paper's Table 11 between consecutive stages).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "clients/labelstore_client.h"
#include "common/status.h"

namespace mlcd::coordinator {

struct StageClustering {
  // By cluster id, k entries.
  std::vector<uint64_t> sizes;
  // With the previous stage's clustering, over the samples both sets label; none for stage 0.
  std::optional<double> adjusted_mutual_info;
};

struct StageClusteringQuery {
  // The stage's set and the previous stage's (empty for stage 0).
  std::string label_set;
  std::string previous_label_set;
  // Sample ids [0, samples) are read; ids without a row (bad samples) are left out.
  uint64_t samples = 0;
  // Clusters per stage (clustering.k): top-1 labels outside [0, k) are DATA_LOSS.
  int32_t k = 0;
};

// Reads the sets through `client` (acting for the job that owns them). Errors of the label
// store come back with the set's name as context; a set labelling no sample is DATA_LOSS.
StatusOr<StageClustering> SummariseStageClustering(const labelstore::LabelStoreClient& client,
                                                   const StageClusteringQuery& query);

}  // namespace mlcd::coordinator
