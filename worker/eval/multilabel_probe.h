// The multi-label linear protocol of the MulSupCon slides (Table 5): one-vs-rest logistic
// regression on frozen features, fitted on the train split and scored on the test split with
// worker/eval/multilabel_metrics.h.
//
// Label j gets its own L2-regularised binary logistic regression
//     f_j(w, b) = Σ_i BCE(σ(w·x_i + b), y_ij) + (λ_j/2)·||w||²      (bias not penalised)
// solved as the equivalent two-class softmax regression of the single-label probe
// (worker/eval/linear_probe.h: L-BFGS, standardised coordinates, deterministic row chunks):
// a softmax over classes {0, 1} with penalty λ' on both rows has its optimum at w₁ = −w₀, so
// its logit difference is the binary model with λ = λ'/2. λ'_j is chosen per label by the
// probe's own search (CLIP's parametric binary search on a seeded 20 % validation split of the
// train rows, the same rows for every label; best validation accuracy, then lowest validation
// cross-entropy, then the larger λ), then the label is refitted on all train rows. The test
// logit of label j is s_ij = (w₁ − w₀)·x_i + (b₁ − b₀) on the L2-normalised features.
//
// A label with no positive (or no negative) among the train rows gets a constant classifier:
// its fit drives the bias towards the only class seen, which is the right prediction there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/eval/features.h"
#include "worker/eval/linear_probe.h"
#include "worker/eval/multilabel_metrics.h"

namespace mlcd::worker {

struct MultiLabelProbeOptions {
  // Validation split, λ grid and search, fixed λ, normalisation and solver of every label's
  // probe (num_classes and on_trial are set per label). fixed_lambda > 0 is the two-class λ'.
  LinearProbeOptions probe;
  // Called after each label's probe (progress reporting); may be empty.
  std::function<void(int label, const LinearProbeResult&)> on_label;
};

struct MultiLabelProbeResult {
  // Test logits, test rows x labels, row-major.
  std::vector<double> test_logits;
  MultiLabelScores scores;
  // The λ' each label's probe chose (two-class convention, as LinearProbeResult::lambda).
  std::vector<double> lambdas;
  double median_lambda = 0;
  double seconds = 0;
};

// The protocol on train/test features and their label matrices (rows must match).
// INVALID_ARGUMENT when the sizes do not fit or the label counts differ.
StatusOr<MultiLabelProbeResult> RunMultiLabelProbe(const FeatureMatrix& train,
                                                   const LabelMatrix& train_labels,
                                                   const FeatureMatrix& test,
                                                   const LabelMatrix& test_labels,
                                                   const MultiLabelProbeOptions& options);

// The test logits of a fitted two-class probe model: (w₁ − w₀)·x + (b₁ − b₀) for each row of
// `x` (already normalised as the probe saw its inputs). Exposed for tests.
std::vector<double> BinaryLogits(const LogisticRegressionModel& model, const FeatureMatrix& x);

}  // namespace mlcd::worker
