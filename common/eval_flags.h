// The evaluation settings both `mlcdctl eval` and `mlcd-worker eval` take (docs/evaluation.md),
// defined once: flag names, defaults, checks and help text. mlcdctl forwards the ones given to
// the `mlcd-worker eval` it runs (EvalSettingsArgs); mlcd-worker applies them over the job
// spec's `evaluation` section (unset flags keep the spec's values).
//
//   EvalSettingsFlags settings;
//   AddEvalSettingsFlags(cmd, &settings);  // --train-limit ... --feature-blocks
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mlcd {

struct EvalSettingsFlags {
  int64_t train_limit = -1;     // --train-limit: first N train images (-1 = the spec's, 0 = all)
  int64_t test_limit = -1;      // --test-limit: first N test images (-1 = the spec's, 0 = all)
  bool no_probe = false;        // --no-linear-probe
  bool no_knn = false;          // --no-knn
  bool no_multi_label = false;  // --no-multi-label
  bool no_attributes = false;   // --no-attributes
  double lambda = 0;            // --lambda: fixed L2 strength (0 = search it)
  int knn_k = 0;                // --knn-k (0 = the spec's)
  std::string features;    // --features: embedding | pooled | blocks | tokens ("" = the spec's)
  int feature_blocks = 0;  // --feature-blocks (0 = the spec's)
};

// Adds --train-limit, --test-limit, --no-linear-probe, --no-knn, --no-multi-label,
// --no-attributes, --lambda, --knn-k, --features and --feature-blocks to `cmd`, writing into *flags (which must outlive the parse).
void AddEvalSettingsFlags(CLI::App* cmd, EvalSettingsFlags* flags);

// The settings that differ from their defaults as `mlcd-worker eval` arguments, in the order
// above (e.g. {"--train-limit", "1000", "--no-knn"}).
std::vector<std::string> EvalSettingsArgs(const EvalSettingsFlags& flags);

}  // namespace mlcd
