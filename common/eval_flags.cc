#include "common/eval_flags.h"

#include "common/job_spec.h"

namespace mlcd {

void AddEvalSettingsFlags(CLI::App* cmd, EvalSettingsFlags* flags) {
  cmd->add_option("--train-limit", flags->train_limit,
                  "only the first N train images (default: evaluation.train_limit; 0 = all)");
  cmd->add_option("--test-limit", flags->test_limit,
                  "only the first N test images (default: evaluation.test_limit; 0 = all)");
  cmd->add_flag("--no-linear-probe", flags->no_probe, "skip the linear probe");
  cmd->add_flag("--no-knn", flags->no_knn, "skip kNN");
  cmd->add_flag("--no-multi-label", flags->no_multi_label,
                "skip the multi-label protocol on a dataset with label sets");
  cmd->add_flag("--no-attributes", flags->no_attributes,
                "skip the per-attribute probes on a dataset with named attributes");
  cmd->add_option("--lambda", flags->lambda,
                  "use this L2 strength instead of the search (sklearn's 1/C)");
  cmd->add_option("--knn-k", flags->knn_k, "kNN neighbours (default: evaluation.knn_k, 20)");
  cmd->add_option(
         "--features", flags->features,
         "what the probe and kNN see: embedding (the projected embedding the loss trains), pooled "
         "(the pooled token before the projection), blocks (pooled tokens of the last "
         "--feature-blocks blocks + mean patch token; DINO's protocol) or tokens (every token of "
         "the last block, concatenated) (default: evaluation.features, embedding; see "
         "docs/evaluation.md)")
      ->check(CLI::IsMember(EvaluationFeatureKinds()));
  cmd->add_option("--feature-blocks", flags->feature_blocks,
                  "blocks for --features blocks (default: evaluation.feature_blocks, 4)")
      ->check(CLI::PositiveNumber);
}

std::vector<std::string> EvalSettingsArgs(const EvalSettingsFlags& flags) {
  std::vector<std::string> args;
  if (flags.train_limit >= 0)
    args.insert(args.end(), {"--train-limit", std::to_string(flags.train_limit)});
  if (flags.test_limit >= 0)
    args.insert(args.end(), {"--test-limit", std::to_string(flags.test_limit)});
  if (flags.no_probe) args.push_back("--no-linear-probe");
  if (flags.no_knn) args.push_back("--no-knn");
  if (flags.no_multi_label) args.push_back("--no-multi-label");
  if (flags.no_attributes) args.push_back("--no-attributes");
  if (flags.lambda > 0) args.insert(args.end(), {"--lambda", std::to_string(flags.lambda)});
  if (flags.knn_k > 0) args.insert(args.end(), {"--knn-k", std::to_string(flags.knn_k)});
  if (!flags.features.empty()) args.insert(args.end(), {"--features", flags.features});
  if (flags.feature_blocks > 0)
    args.insert(args.end(), {"--feature-blocks", std::to_string(flags.feature_blocks)});
  return args;
}

}  // namespace mlcd
