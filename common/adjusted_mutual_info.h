// Adjusted mutual information between two clusterings of the same samples (Vinh, Epps and
// Bailey 2010, "Information theoretic measures for clusterings comparison"), the figure MCL
// reports between the clusterings of consecutive stages (docs/mcl.md).
//
//   AMI(U, V) = (MI(U, V) - E[MI]) / (mean(H(U), H(V)) - E[MI])
//
// with natural logarithms, the arithmetic mean of the entropies (scikit-learn's default
// average_method) and E[MI] the expected mutual information of two random clusterings with
// the same cluster sizes (the hypergeometric model, Vinh et al. Eq. 24a). 1 for identical
// clusterings, about 0 for independent ones; negative when they agree less than chance.
// Both clusterings of one cluster (or none) are identical: 1, as scikit-learn has it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace mlcd {

// The sizes of the clusters of one clustering and their joint counts with another.
struct ContingencyTable {
  uint64_t samples = 0;
  std::vector<uint64_t> row_sizes;            // a_i: samples in cluster i of U
  std::vector<uint64_t> column_sizes;         // b_j: samples in cluster j of V
  std::vector<std::vector<uint64_t>> counts;  // n_ij: samples in both (rows x columns)
};

// The table of `u` and `v` (one cluster id per sample, >= 0; ids need not be dense: only
// the clusters that hold a sample become rows and columns, in increasing id order).
// INVALID_ARGUMENT when the lengths differ, a label is negative or there are no samples.
StatusOr<ContingencyTable> BuildContingencyTable(const std::vector<int64_t>& u,
                                                 const std::vector<int64_t>& v);

// AMI of the table. Its cost is sum over (i, j) of min(a_i, b_j) terms of E[MI].
double AdjustedMutualInfo(const ContingencyTable& table);

// BuildContingencyTable, then AdjustedMutualInfo.
StatusOr<double> AdjustedMutualInfo(const std::vector<int64_t>& u, const std::vector<int64_t>& v);

}  // namespace mlcd
