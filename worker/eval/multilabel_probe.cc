#include "worker/eval/multilabel_probe.h"

#include <algorithm>
#include <chrono>

#include "common/stopwatch.h"

namespace mlcd::worker {
namespace {

// Column j of a label matrix as class ids 0/1.
std::vector<int64_t> Column(const LabelMatrix& labels, int j) {
  std::vector<int64_t> out(static_cast<size_t>(labels.rows));
  for (int64_t i = 0; i < labels.rows; ++i) out[static_cast<size_t>(i)] = labels.at(i, j);
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

std::vector<double> BinaryLogits(const LogisticRegressionModel& model, const FeatureMatrix& x) {
  std::vector<double> out;
  if (model.num_classes != 2 || model.dim != x.cols) return out;
  const int64_t d = x.cols;
  out.resize(static_cast<size_t>(x.rows));
  const double b = model.bias[1] - model.bias[0];
  for (int64_t i = 0; i < x.rows; ++i) {
    const float* xi = x.row(i);
    double z = b;
    for (int64_t k = 0; k < d; ++k) z += (model.weights[d + k] - model.weights[k]) * xi[k];
    out[static_cast<size_t>(i)] = z;
  }
  return out;
}

StatusOr<MultiLabelProbeResult> RunMultiLabelProbe(const FeatureMatrix& train,
                                                   const LabelMatrix& train_labels,
                                                   const FeatureMatrix& test,
                                                   const LabelMatrix& test_labels,
                                                   const MultiLabelProbeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (train_labels.rows != train.rows || test_labels.rows != test.rows)
    return Status::InvalidArgument(
        "multi-label probe: " + std::to_string(train.rows) + " train and " +
        std::to_string(test.rows) + " test rows, but label sets for " +
        std::to_string(train_labels.rows) + " and " + std::to_string(test_labels.rows));
  if (train_labels.cols != test_labels.cols || train_labels.cols < 1)
    return Status::InvalidArgument("multi-label probe: the splits have " +
                                   std::to_string(train_labels.cols) + " and " +
                                   std::to_string(test_labels.cols) + " labels");
  const int L = train_labels.cols;
  FeatureMatrix test_x = test;
  if (options.probe.normalize) L2NormalizeRows(&test_x);
  MultiLabelProbeResult result;
  result.test_logits.assign(static_cast<size_t>(test.rows * L), 0.0);
  for (int j = 0; j < L; ++j) {
    LinearProbeOptions po = options.probe;
    po.num_classes = 2;
    po.on_trial = nullptr;
    StatusOr<LinearProbeResult> fitted =
        RunLinearProbe(train, Column(train_labels, j), test, Column(test_labels, j), po);
    if (!fitted.ok()) return fitted.status().WithContext("label " + std::to_string(j));
    const LinearProbeResult& probe = *fitted;
    const std::vector<double> z = BinaryLogits(probe.model, test_x);
    if (static_cast<int64_t>(z.size()) != test.rows)
      return Status::Internal("multi-label probe: label " + std::to_string(j) +
                              " gave no test logits");
    for (int64_t i = 0; i < test.rows; ++i) result.test_logits[i * L + j] = z[i];
    result.lambdas.push_back(probe.lambda);
    if (options.on_label) options.on_label(j, probe);
  }
  result.median_lambda = Median(result.lambdas);
  MLCD_ASSIGN_OR_RETURN(result.scores, ScoreMultiLabel(result.test_logits, test_labels));
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace mlcd::worker
