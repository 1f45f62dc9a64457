// The evaluation of a dataset's annotations beyond its single class (docs/evaluation.md,
// "Multi-label protocol" and "Attribute probes"): on the same frozen features as the linear
// probe, the multi-label protocol (worker/eval/multilabel_probe.h) when the splits carry label
// sets, and one linear probe per named attribute (worker/eval/attribute_probes.h) when they
// carry attributes, into mlcd.v1.EvaluationResult (multi_label, attributes) and the details.
// The runner calls it for the model and for both baselines, so the three stand side by side.
//
// Hook for models with their own multi-label head (the bce and mulcon objectives):
// ScoreModelPredictions scores the head's test-split logits with the same metrics into
// EvaluationResult.model_predictions; EvaluationOptions::model_test_logits (logits given) or
// EvaluationOptions::predict_test_labels (computed from the loaded model) brings them into
// RunEvaluation.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/eval/attribute_probes.h"
#include "worker/eval/linear_probe.h"
#include "worker/eval/multilabel_metrics.h"

namespace mlcd::worker {

class ImageDataset;

// One named attribute's classes on one split.
struct SplitAttribute {
  std::string name;
  int num_classes = 0;
  std::vector<int64_t> values;  // one class id per row
};

// The annotations of one split, row i = sample id i of the split.
struct SplitAnnotations {
  LabelMatrix label_sets;  // rows 0: no label sets
  std::vector<SplitAttribute> attributes;

  bool empty() const { return label_sets.rows == 0 && attributes.empty(); }
  // The first `rows` rows (a split evaluated with a limit).
  SplitAnnotations Prefix(int64_t rows) const;
};

struct EvalAnnotations {
  SplitAnnotations train, test;
  bool empty() const { return train.empty() && test.empty(); }
};

// The annotations of an opened train and test split (ImageDataset::annotations()); empty when
// the dataset has none. INVALID_ARGUMENT when the splits disagree (label count, attribute
// names or class counts).
StatusOr<EvalAnnotations> AnnotationsOf(const ImageDataset& train, const ImageDataset& test);

struct AnnotationEvalOptions {
  bool multi_label = true;  // EvaluationSpec.multi_label
  bool attributes = true;   // EvaluationSpec.attributes
  // Probe settings (validation split, λ search, solver) shared with the single-label probe.
  LinearProbeOptions probe;
  // Progress reporting: (phase, done, total); may be empty.
  std::function<void(const std::string&, int64_t, int64_t)> on_progress;
};

// Runs what the annotations and options call for on `train`/`test` (rows as the annotations')
// and writes EvaluationResult.multi_label / .attributes and details["multi_label"] /
// details["attributes"]. Nothing when the annotations are empty.
Status EvaluateAnnotations(const FeatureMatrix& train, const FeatureMatrix& test,
                           const EvalAnnotations& annotations, const AnnotationEvalOptions& options,
                           v1::EvaluationResult* result, nlohmann::json* details);

// The metrics of a model's own test-split logits (rows x labels, row-major) against the test
// label sets, into *out (median_lambda 0).
Status ScoreModelPredictions(const std::vector<double>& test_logits, const LabelMatrix& test_labels,
                             v1::MultiLabelMetrics* out);

// Copies the metrics into the proto.
void MultiLabelMetricsToProto(const MultiLabelScores& scores, double median_lambda,
                              v1::MultiLabelMetrics* out);

}  // namespace mlcd::worker
