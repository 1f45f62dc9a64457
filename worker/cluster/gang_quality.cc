#include "worker/cluster/gang_quality.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "common/limits.h"

namespace mlcd::worker::cluster {

v1::ClusterSizeSummary SummarizeSizes(const std::vector<int64_t>& sizes) {
  v1::ClusterSizeSummary s;
  if (sizes.empty()) return s;
  s.set_min(static_cast<uint64_t>(*std::min_element(sizes.begin(), sizes.end())));
  s.set_max(static_cast<uint64_t>(*std::max_element(sizes.begin(), sizes.end())));
  double total = 0, sq = 0;
  uint64_t empty = 0;
  for (int64_t v : sizes) {
    total += static_cast<double>(v);
    sq += static_cast<double>(v) * static_cast<double>(v);
    empty += v == 0;
  }
  const double k = static_cast<double>(sizes.size());
  s.set_mean(total / k);
  s.set_stddev(std::sqrt(std::max(0.0, sq / k - s.mean() * s.mean())));
  s.set_empty_clusters(empty);
  s.set_imbalance_factor(total > 0 ? sq * k / (total * total) : 0);
  return s;
}

StatusOr<v1::LabelQuality> GangLabelQuality(const std::vector<int64_t>& classes,
                                            const std::vector<int32_t>& labels, int k, int l,
                                            Collectives& comm) {
  const int64_t n = static_cast<int64_t>(classes.size());
  if (static_cast<int64_t>(labels.size()) != n * l)
    return Status::Internal("label quality: " + std::to_string(labels.size()) +
                            " labels for " + std::to_string(n) + " rows of " + std::to_string(l));
  int64_t local_max = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (classes[i] < 0 || classes[i] >= kMaxClassId)
      return Status::InvalidArgument("label quality: class id " + std::to_string(classes[i]) +
                                     " is outside [0, " + std::to_string(kMaxClassId) + ")");
    local_max = std::max(local_max, classes[i]);
  }
  // Every rank takes the same decisions from the reduced numbers below.
  at::Tensor head = at::tensor({local_max + 1, n}, at::kLong);
  at::Tensor mx = head.narrow(0, 0, 1).clone();
  MLCD_RETURN_IF_ERROR(comm.AllReduce(mx, ReduceOp::kMax));
  const int64_t num_classes = mx.item<int64_t>();
  if (num_classes < 1) return Status::FailedPrecondition("label quality: no rows");
  if (static_cast<double>(k) * static_cast<double>(num_classes) >
      static_cast<double>(kMaxQualityCells)) {
    return Status::ResourceExhausted(
        "label quality: a table of k = " + std::to_string(k) + " clusters x " +
        std::to_string(num_classes) + " classes exceeds " + std::to_string(kMaxQualityCells) +
        " cells; no quality report");
  }
  at::Tensor table = at::zeros({k * num_classes + 1}, at::kLong);
  int64_t* t = table.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) ++t[static_cast<int64_t>(labels[i * l]) * num_classes + classes[i]];
  t[k * num_classes] = n;
  MLCD_RETURN_IF_ERROR(comm.AllReduce(table, ReduceOp::kSum));
  t = table.data_ptr<int64_t>();
  const double dn = static_cast<double>(t[k * num_classes]);
  if (!(dn > 0)) return Status::FailedPrecondition("label quality: no rows");
  std::vector<int64_t> dominant(static_cast<size_t>(k), -1), cluster_count(k, 0),
      class_count(num_classes, 0);
  v1::LabelQuality q;
  for (int64_t c = 0; c < k; ++c) {
    int64_t best = 0;
    for (int64_t y = 0; y < num_classes; ++y) {
      const int64_t v = t[c * num_classes + y];
      cluster_count[c] += v;
      class_count[y] += v;
      if (v > best) {  // lowest class id on ties
        best = v;
        dominant[c] = y;
      }
    }
    q.set_clusters_used(q.clusters_used() + (cluster_count[c] > 0));
  }
  double mi = 0;
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t y = 0; y < num_classes; ++y) {
      const int64_t v = t[c * num_classes + y];
      if (v == 0) continue;
      mi += (v / dn) * std::log(v * dn / (static_cast<double>(cluster_count[c]) * class_count[y]));
    }
  }
  at::Tensor hits = at::zeros({2}, at::kLong);
  int64_t* h = hits.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* row = labels.data() + i * l;
    h[0] += dominant[row[0]] == classes[i];
    bool any = false;
    for (int j = 0; j < l && !any; ++j) any = dominant[row[j]] == classes[i];
    h[1] += any;
  }
  MLCD_RETURN_IF_ERROR(comm.AllReduce(hits, ReduceOp::kSum));
  h = hits.data_ptr<int64_t>();
  auto entropy = [&](const std::vector<int64_t>& counts) {
    double e = 0;
    for (int64_t v : counts)
      if (v > 0) e -= (v / dn) * std::log(v / dn);
    return e;
  };
  const double hc = entropy(cluster_count), hy = entropy(class_count);
  q.set_top1_recall(h[0] / dn);
  q.set_topl_recall(h[1] / dn);
  q.set_nmi((hc + hy) > 0 ? std::max(0.0, mi) / ((hc + hy) / 2) : 1.0);
  q.set_num_classes(static_cast<uint64_t>(num_classes));
  return q;
}

}  // namespace mlcd::worker::cluster
