#include "worker/eval/multilabel_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace mlcd::worker {

StatusOr<LabelMatrix> LabelMatrixFromSets(int num_labels, const std::vector<int64_t>& offsets,
                                          const std::vector<int32_t>& ids) {
  if (num_labels < 1) return Status::InvalidArgument("label sets need at least one label");
  if (offsets.empty() || offsets.front() != 0 || offsets.back() != static_cast<int64_t>(ids.size()))
    return Status::InvalidArgument("label sets: offsets must run from 0 to the number of ids (" +
                                   std::to_string(ids.size()) + ")");
  LabelMatrix out(static_cast<int64_t>(offsets.size()) - 1, num_labels);
  for (int64_t i = 0; i < out.rows; ++i) {
    if (offsets[i + 1] < offsets[i])
      return Status::InvalidArgument("label sets: offsets decrease at sample " + std::to_string(i));
    for (int64_t k = offsets[i]; k < offsets[i + 1]; ++k) {
      const int32_t j = ids[static_cast<size_t>(k)];
      if (j < 0 || j >= num_labels)
        return Status::InvalidArgument("label sets: sample " + std::to_string(i) + " has label " +
                                       std::to_string(j) + ", outside [0, " +
                                       std::to_string(num_labels) + ")");
      out.set(i, j);
    }
  }
  return out;
}

LabelMatrix FirstRows(const LabelMatrix& labels, int64_t rows) {
  if (rows >= labels.rows) return labels;
  LabelMatrix out = labels;
  out.rows = std::max<int64_t>(rows, 0);
  out.values.resize(static_cast<size_t>(out.rows * out.cols));
  return out;
}

double AveragePrecision(const double* scores, const uint8_t* targets, int64_t n, int64_t stride) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return scores[a * stride] > scores[b * stride]; });
  // Walk the groups of equal scores from the top: every positive of a group gets the
  // precision over all samples scoring at least the group's score.
  int64_t seen = 0, hits = 0, positives = 0;
  double sum = 0;
  for (int64_t begin = 0; begin < n;) {
    int64_t end = begin;
    int64_t group_hits = 0;
    const double s = scores[order[begin] * stride];
    while (end < n && scores[order[end] * stride] == s)
      group_hits += targets[order[end++] * stride];
    seen += end - begin;
    hits += group_hits;
    positives += group_hits;
    sum += static_cast<double>(group_hits) * static_cast<double>(hits) / static_cast<double>(seen);
    begin = end;
  }
  return positives > 0 ? sum / static_cast<double>(positives) : 0.0;
}

StatusOr<MultiLabelScores> ScoreMultiLabel(const std::vector<double>& logits,
                                           const LabelMatrix& targets) {
  const int64_t n = targets.rows;
  const int L = targets.cols;
  if (n < 1 || L < 1) return Status::InvalidArgument("multi-label metrics: no samples or labels");
  if (static_cast<int64_t>(logits.size()) != n * L ||
      static_cast<int64_t>(targets.values.size()) != n * L)
    return Status::InvalidArgument("multi-label metrics: " + std::to_string(logits.size()) +
                                   " scores for " + std::to_string(n) + " samples x " +
                                   std::to_string(L) + " labels");
  for (double s : logits)
    if (std::isnan(s)) return Status::InvalidArgument("multi-label metrics: a score is NaN");
  MultiLabelScores out;
  out.num_labels = L;
  // Per label: average precision and the confusion counts at the threshold.
  int64_t tp_all = 0, fp_all = 0, fn_all = 0, errors = 0;
  double ap_sum = 0, f1_sum = 0;
  for (int j = 0; j < L; ++j) {
    int64_t tp = 0, fp = 0, fn = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool y = targets.at(i, j) != 0, p = logits[i * L + j] > 0;
      tp += y && p;
      fp += !y && p;
      fn += y && !p;
    }
    tp_all += tp;
    fp_all += fp;
    fn_all += fn;
    errors += fp + fn;
    if (tp + fn == 0) continue;  // no positive: no AP, no F1
    ++out.labels_scored;
    ap_sum += AveragePrecision(logits.data() + j, targets.values.data() + j, n, L);
    f1_sum += 2.0 * static_cast<double>(tp) / static_cast<double>(2 * tp + fp + fn);
  }
  if (out.labels_scored > 0) {
    out.mean_average_precision = ap_sum / out.labels_scored;
    out.macro_f1 = f1_sum / out.labels_scored;
  }
  out.hamming_accuracy = 1.0 - static_cast<double>(errors) / static_cast<double>(n * L);
  const int64_t micro_den = 2 * tp_all + fp_all + fn_all;
  out.micro_f1 = micro_den > 0 ? 2.0 * static_cast<double>(tp_all) / micro_den : 0.0;
  // Per sample: example-F1 and precision@1.
  double example_sum = 0;
  int64_t top_hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double* s = logits.data() + i * L;
    int64_t both = 0, truth = 0, predicted = 0;
    int top = 0;
    for (int j = 0; j < L; ++j) {
      const bool y = targets.at(i, j) != 0, p = s[j] > 0;
      both += y && p;
      truth += y;
      predicted += p;
      if (s[j] > s[top]) top = j;
    }
    example_sum += truth + predicted == 0
                       ? 1.0
                       : 2.0 * static_cast<double>(both) / static_cast<double>(truth + predicted);
    if (truth > 0) {
      ++out.samples_with_labels;
      top_hits += targets.at(i, top);
    }
  }
  out.example_f1 = example_sum / static_cast<double>(n);
  if (out.samples_with_labels > 0)
    out.precision_at_1 =
        static_cast<double>(top_hits) / static_cast<double>(out.samples_with_labels);
  return out;
}

}  // namespace mlcd::worker
