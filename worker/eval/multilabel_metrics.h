// Multi-label metrics of per-label scores against per-sample label sets, as the MulSupCon
// slides report them (Table 5: mAP, Hamming accuracy, example-F1, macro-F1, micro-F1,
// precision@1). docs/evaluation.md, "Multi-label protocol", gives each formula.
//
// Scores are logits s_ij (sample i, label j; any real, σ(s_ij) is the probability). A label is
// predicted, ŷ_ij = 1, when σ(s_ij) > kMultiLabelThreshold, i.e. s_ij > 0. Ranking metrics
// (average precision, precision@1) use the scores themselves, so saturated probabilities do
// not create ties.
//
// Conventions for the undefined cases (tested):
//   * average precision groups tied scores: the precision at a positive is taken over every
//     sample scoring at least as high, so the order inside a tie does not matter (scikit-learn's
//     average_precision_score);
//   * a label with no positive in the split has no average precision and no F1: mAP and
//     macro-F1 average over the labels with at least one positive (labels_scored); such a
//     label still counts in Hamming accuracy and micro-F1 (its false positives are errors);
//   * example-F1 of a sample with an empty label set and no predicted label is 1;
//   * precision@1 averages over the samples with at least one label; a tie for the top score
//     goes to the lowest label id.
//
// No torch here: this header is cheap to include.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

// The probability above which a label is predicted (logit > 0).
constexpr double kMultiLabelThreshold = 0.5;

// Per-sample label sets as a dense 0/1 matrix: values[i·cols + j] = 1 when sample i carries
// label j.
struct LabelMatrix {
  int64_t rows = 0;
  int cols = 0;
  std::vector<uint8_t> values;

  LabelMatrix() = default;
  LabelMatrix(int64_t r, int c) : rows(r), cols(c), values(static_cast<size_t>(r * c), 0) {}
  uint8_t at(int64_t i, int j) const { return values[static_cast<size_t>(i * cols + j)]; }
  void set(int64_t i, int j) { values[static_cast<size_t>(i * cols + j)] = 1; }
};

// The dense matrix of `num_samples` label sets given as offsets/ids (sample i's labels are
// ids[offsets[i], offsets[i + 1])). INVALID_ARGUMENT when an id is outside [0, num_labels) or
// the offsets do not fit.
StatusOr<LabelMatrix> LabelMatrixFromSets(int num_labels, const std::vector<int64_t>& offsets,
                                          const std::vector<int32_t>& ids);

// The first `rows` rows of `labels` (all when rows >= labels.rows).
LabelMatrix FirstRows(const LabelMatrix& labels, int64_t rows);

struct MultiLabelScores {
  double mean_average_precision = 0;
  double hamming_accuracy = 0;
  double example_f1 = 0;
  double macro_f1 = 0;
  double micro_f1 = 0;
  double precision_at_1 = 0;
  int num_labels = 0;
  int labels_scored = 0;            // labels with a positive (mAP and macro-F1 average over them)
  int64_t samples_with_labels = 0;  // samples with a label (precision@1 averages over them)
};

// Average precision of one label: scores and targets of n samples, `stride` apart. 0 when
// the label has no positive.
double AveragePrecision(const double* scores, const uint8_t* targets, int64_t n, int64_t stride);

// Every metric of `logits` (targets.rows x targets.cols, row-major) against `targets`.
// INVALID_ARGUMENT when the sizes differ, a score is NaN, or the matrix is empty.
StatusOr<MultiLabelScores> ScoreMultiLabel(const std::vector<double>& logits,
                                           const LabelMatrix& targets);

}  // namespace mlcd::worker
