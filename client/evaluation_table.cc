#include "client/evaluation_table.h"

#include <cstdio>

namespace mlcd::cli {
namespace {

std::string Row(const std::string& indent, const std::string& name, double probe, double knn,
                const std::string& note) {
  char line[160];
  std::snprintf(line, sizeof(line), "%-14s %10.2f %% %8.2f %%", name.c_str(), 100 * probe,
                100 * knn);
  return indent + line + (note.empty() ? "" : "   " + note) + "\n";
}

std::string DisplayName(const std::string& baseline) {
  if (baseline == "random-init") return "random init";
  if (baseline == "raw-pixels") return "raw pixels";
  return baseline;
}

std::string MultiLabelRow(const std::string& indent, const std::string& name,
                          const v1::MultiLabelMetrics& m) {
  char line[200];
  std::snprintf(line, sizeof(line), "%-12s %6.2f %% %6.2f %% %8.2f %% %7.2f %% %7.2f %% %6.2f %%",
                name.c_str(), 100 * m.mean_average_precision(), 100 * m.hamming_accuracy(),
                100 * m.example_f1(), 100 * m.macro_f1(), 100 * m.micro_f1(),
                100 * m.precision_at_1());
  return indent + line + "\n";
}

std::string MultiLabelTable(const v1::EvaluationResult& e, const std::string& indent) {
  const v1::MultiLabelMetrics& m = e.has_multi_label() ? e.multi_label() : e.model_predictions();
  char head[200];
  std::snprintf(head, sizeof(head),
                "%-12s %8s %8s %10s %9s %9s %8s   %d labels (%d with test positives), "
                "threshold %g",
                "multi-label", "mAP", "Hamming", "example-F1", "macro-F1", "micro-F1", "P@1",
                m.num_labels(), m.labels_scored(), m.threshold());
  std::string out = indent + head + "\n";
  if (e.has_multi_label()) out += MultiLabelRow(indent, "trained", e.multi_label());
  if (e.has_model_predictions()) out += MultiLabelRow(indent, "predictions", e.model_predictions());
  for (const auto& b : e.baselines())
    if (b.has_multi_label()) out += MultiLabelRow(indent, DisplayName(b.name()), b.multi_label());
  return out;
}

std::string AttributeTable(const v1::EvaluationResult& e, const std::string& indent) {
  std::string out = indent + "attribute        trained";
  for (const auto& b : e.baselines()) {
    char column[40];
    std::snprintf(column, sizeof(column), " %12s", DisplayName(b.name()).c_str());
    out += column;
  }
  out += "\n";
  for (int i = 0; i < e.attributes_size(); ++i) {
    const auto& a = e.attributes(i);
    char cell[64];
    std::snprintf(cell, sizeof(cell), "%-12s %8.2f %%", a.name().c_str(),
                  100 * a.linear_probe_accuracy());
    out += indent + cell;
    for (const auto& b : e.baselines()) {
      // A baseline's attributes are the same, in the same order, when it scored them.
      if (i < b.attributes_size() && b.attributes(i).name() == a.name()) {
        std::snprintf(cell, sizeof(cell), " %10.2f %%",
                      100 * b.attributes(i).linear_probe_accuracy());
      } else {
        std::snprintf(cell, sizeof(cell), " %12s", "-");
      }
      out += cell;
    }
    char classes[40];
    std::snprintf(classes, sizeof(classes), "   (%d classes)", a.num_classes());
    out += std::string(classes) + "\n";
  }
  return out;
}

}  // namespace

std::string AnnotationTables(const v1::EvaluationResult& e, const std::string& indent) {
  std::string out;
  if (e.has_multi_label() || e.has_model_predictions()) out += MultiLabelTable(e, indent);
  if (e.attributes_size() > 0) out += AttributeTable(e, indent);
  return out;
}

bool HasSingleLabelResult(const v1::EvaluationResult& e) {
  return e.linear_probe_lambda() > 0 || e.knn_accuracy() > 0;
}

std::string EvaluationTable(const v1::EvaluationResult& e, const std::string& indent) {
  if (e.baselines_size() == 0 || !HasSingleLabelResult(e)) return "";
  std::string out = indent + "model          linear probe       kNN";
  if (!e.features().empty() && e.features() != "precomputed") {
    out += "       features: " + e.features();
    if (e.feature_blocks() > 0) out += " (last " + std::to_string(e.feature_blocks()) + " blocks)";
  }
  out += "\n";
  out += Row(indent, "trained", e.linear_probe_accuracy(), e.knn_accuracy(), "");
  for (const auto& b : e.baselines()) {
    out += Row(indent, DisplayName(b.name()), b.linear_probe_accuracy(), b.knn_accuracy(),
               b.cached() ? "(cached)" : "");
  }
  return out;
}

}  // namespace mlcd::cli
