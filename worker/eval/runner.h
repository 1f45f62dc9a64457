// The evaluation phase of a job (`mlcd-worker eval`, the coordinator's EVALUATE assignment):
// embed the labelled train and test splits with the model, fit the linear probe (CLIP
// protocol, worker/eval/linear_probe.h), run kNN (worker/eval/knn.h), and measure the paper's
// Fig. 3 quantities for the final model, all into one mlcd.v1.EvaluationResult.
//
// Inputs, one of:
//   * a model: a checkpoint (directory or root with LATEST), or a random initialisation from
//     the spec (the "random ViT" baseline); the splits come from spec.evaluation.dataset
//     (default: the job's dataset), train rows limited by dataset.limit and
//     evaluation.train_limit, test rows by evaluation.test_limit;
//   * precomputed features: .npy shards of the train and test splits with their class labels
//     (e.g. raw pixels from `mlcd-clusterd features`, or the output of `mlcd-worker embed`).
//
// With world_size W > 1 (a gang), rank ρ embeds its contiguous part of both splits and the
// parts are gathered to rank 0 over c10d (Gloo; rendezvous at rank 0's TCPStore); rank 0
// runs the probe and kNN and returns the result, the other ranks return an empty report.
//
// Fig. 3 quantities (mean cosine of a training image's embedding to its positive class
// centres, and to all other centres), computed when the model is a checkpoint that names
// its label set and a label store address is given: the centres are the checkpoint's
// class_centres.*.weight.npy (every range), the positives the label set's rows for the
// training images embedded here. Negatives are all non-positive centres (the expected value
// of PartialFC's uniformly sampled negatives). Skipped (0, with a note in the details) when
// any of that is missing or the evaluation dataset is not the training dataset.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/eval/annotation_eval.h"
#include "worker/eval/knn.h"
#include "worker/eval/linear_probe.h"

namespace mlcd::worker {

struct EmbeddingModel;
class ImageDataset;

struct EvaluationOptions {
  // The model: a checkpoint, or (empty) a random initialisation from `spec`.
  std::string checkpoint;
  // Dataset, evaluation settings and (for a random init) the architecture. When
  // `has_spec` is false the checkpoint's own spec is used.
  v1::JobSpec spec;
  bool has_spec = false;
  // Precomputed features instead of a model (both splits; labels beside the shards as
  // *.labels.npy unless given).
  std::vector<std::string> train_features, test_features;
  std::vector<std::string> train_labels, test_labels;

  // MCL: the stage encoders in stage order (RunStageEvaluation, stage_evaluation.h); the
  // checkpoint above is then unused.
  std::vector<std::string> stage_checkpoints;
  // Gang (model inputs only).
  int rank = 0;
  int world_size = 1;
  std::string rendezvous;
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(300)};

  // Images per forward pass.
  int64_t batch_size = 256;
  // Overrides of spec.evaluation (negative = take the spec's value).
  int64_t train_limit = -1;
  int64_t test_limit = -1;
  // Probe and kNN settings. k and temperature come from spec.evaluation (knn_k,
  // knn_temperature) unless overridden here (> 0).
  LinearProbeOptions probe;
  KnnOptions knn;
  int knn_k = 0;
  double knn_temperature = 0;
  // What the probe and kNN see of the model ("embedding", "pooled", "blocks", "tokens"; empty = the
  // spec's evaluation.features) and the blocks for "blocks" (0 = spec's feature_blocks).
  std::string features;
  int feature_blocks = 0;
  int run_probe = -1;  // -1 = spec.evaluation.linear_probe, 0 = no, 1 = yes
  int run_knn = -1;
  int run_multi_label = -1;  // -1 = spec.evaluation.multi_label
  int run_attributes = -1;   // -1 = spec.evaluation.attributes

  // Label sets and attributes of the precomputed features' rows (worker/eval/annotation_eval.h);
  // null = none. A model's evaluation reads them from the evaluation dataset instead
  // (ImageDataset::annotations()). Either way the splits need class labels, annotations, or
  // both: the single-label probe and kNN run when there are class labels.
  std::shared_ptr<const EvalAnnotations> annotations;
  // A model with its own multi-label head (the bce and mulcon objectives): its logits on the
  // test split (test rows x labels, row-major), scored against the test label sets into
  // EvaluationResult.model_predictions. Either given here, or computed by
  // `predict_test_labels` from the loaded model and the opened test split (rank 0, after the
  // embedding; the head reads its own weights from model.checkpoint). Neither = no such head.
  std::vector<double> model_test_logits;
  std::function<StatusOr<std::vector<double>>(const EmbeddingModel& model,
                                              const ImageDataset& test)>
      predict_test_labels;

  // Fig. 3 cosines: label set (empty = the checkpoint's) and label store address (empty =
  // skip).
  std::string label_set;
  std::string labelstore_address;

  // Rank 0 writes evaluation.json (protobuf JSON of mlcd.v1.EvaluationResult) and
  // evaluation-details.json here (empty = nothing written); with keep_embeddings also the
  // embedded splits as shards under train/ and test/ (worker/eval/features.h layout).
  std::string output_dir;
  bool keep_embeddings = false;

  // Progress events ({"event":"progress","phase":...,"rows_done":..,"rows_total":..}).
  std::function<void(const nlohmann::json&)> on_event;
};

struct EvaluationReport {
  // False on ranks other than 0 of a gang (they only embed).
  bool has_result = false;
  v1::EvaluationResult result;
  // Everything else worth keeping: λ trials, solver iterations, timings, sizes, notes.
  nlohmann::json details;
  // Files written (evaluation.json first).
  std::vector<std::string> outputs;
  // The label sets and attributes of the evaluated splits' rows (rank 0; null when they have
  // none), for a later evaluation of other features of the same rows (MCL's concatenation).
  std::shared_ptr<const EvalAnnotations> annotations;
};

StatusOr<EvaluationReport> RunEvaluation(const EvaluationOptions& options);

// (Re)writes <output_dir>/evaluation.json and evaluation-details.json from `report`, and puts
// both paths first in report->outputs unless they are there. Called by RunEvaluation, and
// again by whoever adds to the result afterwards (the baselines), so the files hold it all.
Status WriteResultFiles(const std::string& output_dir, EvaluationReport* report);

// The Fig. 3 quantities for embeddings (rows L2-normalised) and their positive labels
// (n x l, < 0 = padding) against class centres (k x d, any norm): the mean cosine over all
// (sample, positive) pairs and over all (sample, other centre) pairs. Exposed for tests.
void MeanPositiveNegativeCosine(const FeatureMatrix& embeddings, const std::vector<int32_t>& labels,
                                int l, const FeatureMatrix& centres, double* mean_positive,
                                double* mean_negative);

// Reads every class_centres.<begin>-<end>.weight.npy of a checkpoint directory into one
// k x d matrix (ranges must tile [0, k)). NOT_FOUND when there are none.
StatusOr<FeatureMatrix> ReadCheckpointClassCentres(const std::string& checkpoint_dir);

}  // namespace mlcd::worker
