#include "coordinator/tensorboard_log.h"

#include <vector>

#include "common/event_file.h"

namespace mlcd::coordinator {
namespace {

constexpr const char* kCoordinatorRun = "/coordinator";

Status WriteOnce(const std::string& tensorboard_dir, int64_t step,
                 const std::vector<EventScalar>& scalars) {
  if (tensorboard_dir.empty()) return Status::Ok();
  MLCD_ASSIGN_OR_RETURN(auto writer,
                        EventFileWriter::Create(tensorboard_dir + kCoordinatorRun, "coordinator"));
  MLCD_RETURN_IF_ERROR(writer->WriteScalars(step, scalars));
  return writer->Close();
}

float F(double v) { return static_cast<float>(v); }

}  // namespace

std::string TensorboardDir(const std::string& data_dir, const std::string& job_id) {
  if (data_dir.empty() || job_id.empty()) return "";
  return data_dir + "/jobs/" + job_id + "/tensorboard";
}

Status WriteRoundScalars(const std::string& tensorboard_dir, const v1::RoundStatus& round) {
  const v1::ClusterResult& c = round.cluster();
  const v1::AssignResult& a = round.assign();
  std::vector<EventScalar> s = {
      {"clustering/objective", F(c.final_objective())},
      {"clustering/iterations", F(c.iterations())},
      {"clustering/seconds", F(c.seconds())},
      {"labels/approx_recall", F(a.approx_recall())},
      {"labels/seconds", F(a.seconds())},
  };
  if (c.has_sizes()) {
    s.push_back({"clustering/empty_clusters", F(static_cast<double>(c.sizes().empty_clusters()))});
    s.push_back({"clustering/imbalance_factor", F(c.sizes().imbalance_factor())});
  }
  if (a.has_quality()) {
    const v1::LabelQuality& q = a.quality();
    s.push_back({"labels/top1_recall", F(q.top1_recall())});
    s.push_back({"labels/topl_recall", F(q.topl_recall())});
    s.push_back({"labels/nmi", F(q.nmi())});
    s.push_back({"labels/clusters_used", F(static_cast<double>(q.clusters_used()))});
  }
  return WriteOnce(tensorboard_dir, round.round(), s);
}

Status WriteEvaluationScalars(const std::string& tensorboard_dir, int64_t step,
                              const v1::EvaluationResult& evaluation) {
  std::vector<EventScalar> s = {
      {"eval/linear_probe_accuracy/model", F(evaluation.linear_probe_accuracy())},
      {"eval/knn_accuracy/model", F(evaluation.knn_accuracy())},
  };
  // The multi-label mAP and each attribute's probe, model and baselines in one chart each.
  auto annotations = [&s](const std::string& who, const v1::MultiLabelMetrics* m,
                          const google::protobuf::RepeatedPtrField<v1::AttributeProbeResult>& a) {
    if (m) s.push_back({"eval/multi_label_map/" + who, F(m->mean_average_precision())});
    for (const auto& p : a)
      s.push_back({"eval/attribute_" + p.name() + "/" + who, F(p.linear_probe_accuracy())});
  };
  annotations("model", evaluation.has_multi_label() ? &evaluation.multi_label() : nullptr,
              evaluation.attributes());
  for (const auto& b : evaluation.baselines()) {
    s.push_back({"eval/linear_probe_accuracy/" + b.name(), F(b.linear_probe_accuracy())});
    s.push_back({"eval/knn_accuracy/" + b.name(), F(b.knn_accuracy())});
    annotations(b.name(), b.has_multi_label() ? &b.multi_label() : nullptr, b.attributes());
  }
  return WriteOnce(tensorboard_dir, step, s);
}

}  // namespace mlcd::coordinator
