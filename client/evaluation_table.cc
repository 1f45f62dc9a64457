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

}  // namespace

std::string EvaluationTable(const v1::EvaluationResult& e, const std::string& indent) {
  if (e.baselines_size() == 0) return "";
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
