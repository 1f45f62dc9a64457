#include "worker/eval/annotation_eval.h"

#include <algorithm>

#include "common/log.h"
#include "worker/eval/multilabel_probe.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {
namespace {

// One split's annotations in evaluation's form: the label sets dense, the attributes' ids as
// int64, both cut to the split's images.
StatusOr<SplitAnnotations> FromDataset(const ImageDataset& data) {
  const DatasetAnnotations& a = data.annotations();
  SplitAnnotations out;
  const int64_t n = data.size();
  if (!a.labels.empty()) {
    if (a.labels.num_samples() < n)
      return Status::InvalidArgument(data.Describe() + ": label sets for " +
                                     std::to_string(a.labels.num_samples()) + " of " +
                                     std::to_string(n) + " samples");
    MLCD_ASSIGN_OR_RETURN(out.label_sets,
                          LabelMatrixFromSets(a.labels.num_labels, a.labels.offsets, a.labels.ids));
    out.label_sets = FirstRows(out.label_sets, n);
  }
  for (const Attribute& attribute : a.attributes) {
    if (static_cast<int64_t>(attribute.values.size()) < n)
      return Status::InvalidArgument(data.Describe() + ": attribute " + attribute.name + " for " +
                                     std::to_string(attribute.values.size()) + " of " +
                                     std::to_string(n) + " samples");
    SplitAttribute s{attribute.name, attribute.num_classes, {}};
    s.values.assign(attribute.values.begin(), attribute.values.begin() + n);
    out.attributes.push_back(std::move(s));
  }
  return out;
}

}  // namespace

SplitAnnotations SplitAnnotations::Prefix(int64_t rows) const {
  SplitAnnotations out;
  out.label_sets = FirstRows(label_sets, rows);
  for (const SplitAttribute& a : attributes) {
    SplitAttribute cut{a.name, a.num_classes, a.values};
    if (static_cast<int64_t>(cut.values.size()) > rows)
      cut.values.resize(static_cast<size_t>(std::max<int64_t>(rows, 0)));
    out.attributes.push_back(std::move(cut));
  }
  return out;
}

StatusOr<EvalAnnotations> AnnotationsOf(const ImageDataset& train, const ImageDataset& test) {
  EvalAnnotations out;
  MLCD_ASSIGN_OR_RETURN(out.train, FromDataset(train));
  MLCD_ASSIGN_OR_RETURN(out.test, FromDataset(test));
  if (out.train.label_sets.cols != out.test.label_sets.cols)
    return Status::InvalidArgument("the evaluation dataset's splits have " +
                                   std::to_string(out.train.label_sets.cols) + " and " +
                                   std::to_string(out.test.label_sets.cols) +
                                   " labels: rebuild both with the same annotations.json");
  bool same = out.train.attributes.size() == out.test.attributes.size();
  for (size_t i = 0; same && i < out.train.attributes.size(); ++i)
    same = out.train.attributes[i].name == out.test.attributes[i].name &&
           out.train.attributes[i].num_classes == out.test.attributes[i].num_classes;
  if (!same)
    return Status::InvalidArgument(
        "the evaluation dataset's splits name different attributes (or class counts): rebuild "
        "both with the same annotations.json");
  return out;
}

void MultiLabelMetricsToProto(const MultiLabelScores& s, double median_lambda,
                              v1::MultiLabelMetrics* out) {
  out->set_mean_average_precision(s.mean_average_precision);
  out->set_hamming_accuracy(s.hamming_accuracy);
  out->set_example_f1(s.example_f1);
  out->set_macro_f1(s.macro_f1);
  out->set_micro_f1(s.micro_f1);
  out->set_precision_at_1(s.precision_at_1);
  out->set_threshold(kMultiLabelThreshold);
  out->set_num_labels(s.num_labels);
  out->set_labels_scored(s.labels_scored);
  out->set_median_lambda(median_lambda);
}

Status ScoreModelPredictions(const std::vector<double>& test_logits, const LabelMatrix& test_labels,
                             v1::MultiLabelMetrics* out) {
  MLCD_ASSIGN_OR_RETURN(MultiLabelScores s, ScoreMultiLabel(test_logits, test_labels));
  MultiLabelMetricsToProto(s, 0, out);
  return Status::Ok();
}

Status EvaluateAnnotations(const FeatureMatrix& train, const FeatureMatrix& test,
                           const EvalAnnotations& annotations, const AnnotationEvalOptions& options,
                           v1::EvaluationResult* result, nlohmann::json* details) {
  auto progress = [&](const std::string& phase, int64_t done, int64_t total) {
    if (options.on_progress) options.on_progress(phase, done, total);
  };
  if (options.multi_label && annotations.train.label_sets.rows > 0 &&
      annotations.test.label_sets.rows > 0) {
    MultiLabelProbeOptions mo;
    mo.probe = options.probe;
    const int L = annotations.train.label_sets.cols;
    mo.on_label = [&](int label, const LinearProbeResult&) {
      progress("multi-label probe", label + 1, L);
    };
    MLCD_ASSIGN_OR_RETURN(MultiLabelProbeResult r,
                          RunMultiLabelProbe(train, annotations.train.label_sets, test,
                                             annotations.test.label_sets, mo));
    MultiLabelMetricsToProto(r.scores, r.median_lambda, result->mutable_multi_label());
    const MultiLabelScores& s = r.scores;
    (*details)["multi_label"] = {{"mean_average_precision", s.mean_average_precision},
                                 {"hamming_accuracy", s.hamming_accuracy},
                                 {"example_f1", s.example_f1},
                                 {"macro_f1", s.macro_f1},
                                 {"micro_f1", s.micro_f1},
                                 {"precision_at_1", s.precision_at_1},
                                 {"threshold", kMultiLabelThreshold},
                                 {"num_labels", s.num_labels},
                                 {"labels_scored", s.labels_scored},
                                 {"samples_with_labels", s.samples_with_labels},
                                 {"lambdas", r.lambdas},
                                 {"seconds", r.seconds}};
    MLCD_LOG(INFO) << "multi-label probe: mAP " << 100 * s.mean_average_precision
                   << " %, example-F1 " << 100 * s.example_f1 << " % over " << s.num_labels
                   << " labels (" << r.seconds << " s)";
  }
  if (options.attributes && !annotations.train.attributes.empty()) {
    std::vector<AttributeLabels> attributes;
    for (size_t i = 0; i < annotations.train.attributes.size(); ++i) {
      const SplitAttribute& tr = annotations.train.attributes[i];
      if (i >= annotations.test.attributes.size())
        return Status::InvalidArgument("attribute " + tr.name + " is missing in the test split");
      attributes.push_back(
          {tr.name, tr.num_classes, tr.values, annotations.test.attributes[i].values});
    }
    progress("attribute probes", 0, static_cast<int64_t>(attributes.size()));
    MLCD_ASSIGN_OR_RETURN(std::vector<AttributeProbe> probes,
                          RunAttributeProbes(train, test, attributes, options.probe));
    nlohmann::json list = nlohmann::json::array();
    for (const AttributeProbe& p : probes) {
      v1::AttributeProbeResult* a = result->add_attributes();
      a->set_name(p.name);
      a->set_num_classes(p.num_classes);
      a->set_linear_probe_accuracy(p.probe.test_accuracy);
      a->set_linear_probe_lambda(p.probe.lambda);
      list.push_back({{"name", p.name},
                      {"num_classes", p.num_classes},
                      {"test_accuracy", p.probe.test_accuracy},
                      {"lambda", p.probe.lambda},
                      {"validation_accuracy", p.probe.validation_accuracy},
                      {"seconds", p.probe.seconds}});
      MLCD_LOG(INFO) << "attribute " << p.name << ": linear probe " << 100 * p.probe.test_accuracy
                     << " %";
    }
    (*details)["attributes"] = list;
    progress("attribute probes", static_cast<int64_t>(probes.size()),
             static_cast<int64_t>(probes.size()));
  }
  return Status::Ok();
}

}  // namespace mlcd::worker
