#include "clusterd/quality.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "clusterd/feature_source.h"

namespace mlcd::clusterd {

LabelQuality ComputeLabelQuality(const std::vector<int64_t>& classes,
                                 const std::vector<int32_t>& labels, int k, int l) {
  LabelQuality q;
  const int64_t n = static_cast<int64_t>(classes.size());
  q.rows = n;
  if (n == 0 || k < 1 || l < 1) return q;
  int64_t num_classes = 0;
  for (int64_t c : classes) num_classes = std::max(num_classes, c + 1);
  q.num_classes = num_classes;

  // Contingency counts of (top-1 cluster, class): dense when the table is small (at most 2^22
  // cells, 32 MiB), hashed otherwise (at most n distinct cells).
  const bool dense = static_cast<double>(k) * static_cast<double>(num_classes) <= double(1 << 22);
  std::vector<int64_t> table(dense ? static_cast<size_t>(k) * num_classes : 0, 0);
  std::unordered_map<int64_t, int64_t> sparse;
  std::vector<int64_t> cluster_count(static_cast<size_t>(k), 0),
      class_count(static_cast<size_t>(num_classes), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t c = labels[i * l];
    int64_t y = classes[i];
    ++cluster_count[c];
    ++class_count[y];
    if (dense)
      ++table[c * num_classes + y];
    else
      ++sparse[c * num_classes + y];
  }
  // Dominant class of each cluster (lowest class id on ties); -1 for unused clusters.
  std::vector<int64_t> dominant(static_cast<size_t>(k), -1),
      dominant_count(static_cast<size_t>(k), 0);
  auto visit = [&](int64_t c, int64_t y, int64_t count) {
    if (count > dominant_count[c] || (count == dominant_count[c] && count > 0 && y < dominant[c])) {
      dominant[c] = y;
      dominant_count[c] = count;
    }
  };
  double mi = 0;
  const double dn = static_cast<double>(n);
  auto add_mi = [&](int64_t c, int64_t y, int64_t count) {
    if (count == 0) return;
    double p = count / dn;
    mi += p * std::log(count * dn / (static_cast<double>(cluster_count[c]) * class_count[y]));
  };
  if (dense) {
    for (int64_t c = 0; c < k; ++c)
      for (int64_t y = 0; y < num_classes; ++y) {
        int64_t v = table[c * num_classes + y];
        visit(c, y, v);
        add_mi(c, y, v);
      }
  } else {
    for (const auto& [key, v] : sparse) {
      visit(key / num_classes, key % num_classes, v);
      add_mi(key / num_classes, key % num_classes, v);
    }
  }
  for (int64_t c = 0; c < k; ++c) q.clusters_used += cluster_count[c] > 0;

  int64_t top1 = 0, topl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* row = labels.data() + i * l;
    top1 += dominant[row[0]] == classes[i];
    bool any = false;
    for (int j = 0; j < l && !any; ++j) any = row[j] >= 0 && dominant[row[j]] == classes[i];
    topl += any;
  }
  q.top1_recall = top1 / dn;
  q.topl_recall = topl / dn;

  auto entropy = [&](const std::vector<int64_t>& counts) {
    double h = 0;
    for (int64_t v : counts)
      if (v > 0) h -= (v / dn) * std::log(v / dn);
    return h;
  };
  double hc = entropy(cluster_count), hy = entropy(class_count);
  q.nmi = (hc + hy) > 0 ? std::max(0.0, mi) / ((hc + hy) / 2) : 1.0;
  return q;
}

LabelQualityAccumulator::LabelQualityAccumulator(std::vector<int64_t> classes, int k, int l)
    : classes_(std::move(classes)), k_(k), l_(l) {
  labels_.assign(classes_.size() * static_cast<size_t>(l), -1);
}

void LabelQualityAccumulator::Add(int64_t first_row, int64_t rows, const int32_t* labels) {
  std::copy(labels, labels + rows * l_, labels_.begin() + first_row * l_);
  rows_added_ += rows;
}

StatusOr<LabelQuality> LabelQualityAccumulator::Finish() const {
  if (rows_added_ != static_cast<int64_t>(classes_.size())) {
    return Status::FailedPrecondition("label quality: " + std::to_string(rows_added_) + " of " +
                                      std::to_string(classes_.size()) + " rows were added");
  }
  // ComputeLabelQuality indexes counters by class and cluster id: check both ranges first.
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i] < 0 || classes_[i] >= kMaxClassId) {
      return Status::InvalidArgument("label quality: class id " + std::to_string(classes_[i]) +
                                     " of row " + std::to_string(i) + " is outside [0, " +
                                     std::to_string(kMaxClassId) + ")");
    }
  }
  for (size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] < 0 || labels_[i] >= k_) {
      return Status::Internal("label quality: cluster id " + std::to_string(labels_[i]) +
                              " of row " + std::to_string(i / static_cast<size_t>(l_)) +
                              " is outside [0, " + std::to_string(k_) + ")");
    }
  }
  try {
    return ComputeLabelQuality(classes_, labels_, k_, l_);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("label quality: out of memory for the counters of " +
                                     std::to_string(k_) + " clusters");
  }
}

}  // namespace mlcd::clusterd
