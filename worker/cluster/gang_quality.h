// The statistics of a gang's top-l assignment, reduced over its ranks: the cluster sizes
// among the top-1 labels and the label quality against true classes (paper appendix A.8),
// by the definitions clusterd uses (clusterd/quality.h): each cluster mapped to its dominant
// class (lowest class id on ties) among the rows whose top-1 it is; top-1 / top-l recall of
// the rows' classes; the NMI of the top-1 assignment (arithmetic normalisation).
//
// Over ranks: the (top-1 cluster, class) contingency table is dense, k x C int64, summed by
// one all-reduce (every rank then knows every cluster's dominant class), then the recall
// counts by a second. The table is refused above kMaxQualityCells (RESOURCE_EXHAUSTED naming
// k and C: the caller skips the report, the labels are unaffected).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/clusterd.pb.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker::cluster {

// 2^25 cells: a 256 MiB int64 table (e.g. k = 32 768 clusters x 1 000 classes).
inline constexpr int64_t kMaxQualityCells = int64_t{1} << 25;

// min, max, mean, stddev (population), empty clusters and FAISS's imbalance factor
// k * sum(size^2) / n^2 of cluster sizes.
v1::ClusterSizeSummary SummarizeSizes(const std::vector<int64_t>& sizes);

// `classes`: this rank's rows' true classes (>= 0); `labels`: their labels, rows x l, best
// first, in [0, k). Every rank calls it (collective).
StatusOr<v1::LabelQuality> GangLabelQuality(const std::vector<int64_t>& classes,
                                            const std::vector<int32_t>& labels, int k, int l,
                                            Collectives& comm);

}  // namespace mlcd::worker::cluster
