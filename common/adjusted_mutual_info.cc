#include "common/adjusted_mutual_info.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

namespace mlcd {
namespace {

// Dense ids of the distinct labels in increasing order.
std::map<int64_t, size_t> DenseIds(const std::vector<int64_t>& labels) {
  std::map<int64_t, size_t> ids;
  for (int64_t x : labels) ids.emplace(x, 0);
  size_t next = 0;
  for (auto& [label, id] : ids) id = next++;
  return ids;
}

double Entropy(const std::vector<uint64_t>& sizes, double n) {
  double h = 0;
  for (uint64_t a : sizes) {
    if (a > 0) h -= (a / n) * std::log(a / n);
  }
  return h;
}

}  // namespace

StatusOr<ContingencyTable> BuildContingencyTable(const std::vector<int64_t>& u,
                                                 const std::vector<int64_t>& v) {
  if (u.size() != v.size()) {
    return Status::InvalidArgument("the clusterings label " + std::to_string(u.size()) + " and " +
                                   std::to_string(v.size()) + " samples; they must label the same");
  }
  if (u.empty()) return Status::InvalidArgument("the clusterings label no samples");
  for (size_t i = 0; i < u.size(); ++i) {
    if (u[i] < 0 || v[i] < 0) {
      return Status::InvalidArgument("sample " + std::to_string(i) + " has no cluster (label " +
                                     std::to_string(std::min(u[i], v[i])) + ")");
    }
  }
  const std::map<int64_t, size_t> rows = DenseIds(u);
  const std::map<int64_t, size_t> columns = DenseIds(v);
  ContingencyTable t;
  t.samples = u.size();
  t.row_sizes.assign(rows.size(), 0);
  t.column_sizes.assign(columns.size(), 0);
  t.counts.assign(rows.size(), std::vector<uint64_t>(columns.size(), 0));
  for (size_t s = 0; s < u.size(); ++s) {
    const size_t i = rows.at(u[s]);
    const size_t j = columns.at(v[s]);
    ++t.row_sizes[i];
    ++t.column_sizes[j];
    ++t.counts[i][j];
  }
  return t;
}

double AdjustedMutualInfo(const ContingencyTable& t) {
  const size_t r = t.row_sizes.size();
  const size_t c = t.column_sizes.size();
  // One cluster on both sides (or none): the same clustering.
  if ((r == 1 && c == 1) || (r == 0 && c == 0)) return 1.0;
  const double n = static_cast<double>(t.samples);
  double mi = 0;
  for (size_t i = 0; i < r; ++i) {
    for (size_t j = 0; j < c; ++j) {
      const double nij = static_cast<double>(t.counts[i][j]);
      if (nij > 0) {
        mi += (nij / n) *
              std::log(n * nij / (static_cast<double>(t.row_sizes[i]) * t.column_sizes[j]));
      }
    }
  }
  // E[MI] under the hypergeometric model, in log space through lgamma.
  const double lg_n = std::lgamma(n + 1);
  double emi = 0;
  for (size_t i = 0; i < r; ++i) {
    const double a = static_cast<double>(t.row_sizes[i]);
    for (size_t j = 0; j < c; ++j) {
      const double b = static_cast<double>(t.column_sizes[j]);
      const double fixed = std::lgamma(a + 1) + std::lgamma(b + 1) + std::lgamma(n - a + 1) +
                           std::lgamma(n - b + 1) - lg_n;
      const uint64_t lo = static_cast<uint64_t>(std::max(1.0, a + b - n));
      const uint64_t hi = static_cast<uint64_t>(std::min(a, b));
      for (uint64_t k = lo; k <= hi; ++k) {
        const double x = static_cast<double>(k);
        const double log_p = fixed - std::lgamma(x + 1) - std::lgamma(a - x + 1) -
                             std::lgamma(b - x + 1) - std::lgamma(n - a - b + x + 1);
        emi += (x / n) * std::log(n * x / (a * b)) * std::exp(log_p);
      }
    }
  }
  const double mean_h = 0.5 * (Entropy(t.row_sizes, n) + Entropy(t.column_sizes, n));
  double denominator = mean_h - emi;
  // As scikit-learn: keep the sign, never divide by (nearly) zero.
  const double eps = std::numeric_limits<double>::epsilon();
  denominator = denominator < 0 ? std::min(denominator, -eps) : std::max(denominator, eps);
  return (mi - emi) / denominator;
}

StatusOr<double> AdjustedMutualInfo(const std::vector<int64_t>& u, const std::vector<int64_t>& v) {
  MLCD_ASSIGN_OR_RETURN(const ContingencyTable table, BuildContingencyTable(u, v));
  return AdjustedMutualInfo(table);
}

}  // namespace mlcd
