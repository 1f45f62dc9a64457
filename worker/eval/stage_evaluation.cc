#include "worker/eval/stage_evaluation.h"

#include <utility>
#include <vector>

#include "worker/eval/features.h"
#include "worker/eval/stage_concat.h"

namespace mlcd::worker {
namespace {

// The kept split of every stage, concatenated into one shard under `out`.
Status ConcatenateSplit(const std::vector<std::string>& stage_dirs, const std::string& split,
                        const std::string& out) {
  std::vector<FeatureMatrix> parts;
  LabelledFeatures first;
  for (size_t j = 0; j < stage_dirs.size(); ++j) {
    MLCD_ASSIGN_OR_RETURN(LabelledFeatures f, LoadLabelledFeatures({stage_dirs[j] + "/" + split}));
    if (j > 0 && f.ids != first.ids) {
      return Status::Internal("stage " + std::to_string(j) + " embedded other " + split +
                              " rows than stage 0");
    }
    parts.push_back(std::move(f.features));
    if (j == 0) first = std::move(f);
  }
  MLCD_ASSIGN_OR_RETURN(const FeatureMatrix all, ConcatenateStageFeatures(parts));
  return WriteEmbeddingShard(out, 0, 1, all, first.ids, &first.labels);
}

}  // namespace

StatusOr<EvaluationReport> RunStageEvaluation(const EvaluationOptions& options) {
  if (options.stage_checkpoints.empty())
    return Status::InvalidArgument("no stage checkpoints to evaluate");
  if (options.output_dir.empty())
    return Status::InvalidArgument("an MCL evaluation needs an output directory (--out)");
  std::vector<std::string> dirs;
  std::vector<v1::EvaluationResult> stage_results;
  // The splits' annotations, the same rows for every stage: the concatenation's probes too.
  std::shared_ptr<const EvalAnnotations> annotations;
  nlohmann::json details = nlohmann::json::object();
  for (size_t j = 0; j < options.stage_checkpoints.size(); ++j) {
    EvaluationOptions o = options;
    o.stage_checkpoints.clear();
    o.checkpoint = options.stage_checkpoints[j];
    o.output_dir = options.output_dir + "/stage" + std::to_string(j);
    o.keep_embeddings = true;
    o.labelstore_address.clear();  // no class centres: no Fig. 3 cosines
    StatusOr<EvaluationReport> stage = RunEvaluation(o);
    if (!stage.ok()) return stage.status().WithContext("stage " + std::to_string(j));
    if (!stage->has_result) continue;  // a gang's other ranks only embed
    dirs.push_back(o.output_dir);
    if (!annotations) annotations = stage->annotations;
    stage_results.push_back(stage->result);
    details["stage" + std::to_string(j)] = std::move(stage->details);
  }
  if (dirs.size() != options.stage_checkpoints.size()) return EvaluationReport{};
  const std::string concat = options.output_dir + "/concat";
  for (const char* split : {"train", "test"})
    MLCD_RETURN_IF_ERROR(ConcatenateSplit(dirs, split, concat + "/" + split));
  EvaluationOptions o = options;
  o.stage_checkpoints.clear();
  o.checkpoint.clear();
  o.train_features = {concat + "/train"};
  o.test_features = {concat + "/test"};
  o.rank = 0;
  o.world_size = 1;
  o.labelstore_address.clear();
  o.annotations = annotations;
  o.predict_test_labels = nullptr;
  MLCD_ASSIGN_OR_RETURN(EvaluationReport report, RunEvaluation(o));
  for (auto& r : stage_results) *report.result.add_stages() = std::move(r);
  report.result.set_checkpoint(options.stage_checkpoints.back());
  report.details["stages"] = std::move(details);
  MLCD_RETURN_IF_ERROR(WriteResultFiles(options.output_dir, &report));
  return report;
}

}  // namespace mlcd::worker
