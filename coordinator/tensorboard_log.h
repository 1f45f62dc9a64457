// The coordinator's TensorBoard scalars of a job (docs/metrics.md, "TensorBoard"): the
// figures it receives, written as event files (common/event_file.h) into the run
// <job dir>/tensorboard/coordinator/. Each call writes one small file of its own (created,
// written, fsynced, closed), so a coordinator that dies leaves whole files behind and a
// restarted one never appends to an older file.
//
// Tags (step = the round for round figures, the job's last optimizer step for evaluation):
//   clustering/objective, clustering/iterations, clustering/seconds,
//   clustering/empty_clusters, clustering/imbalance_factor
//   labels/top1_recall, labels/topl_recall, labels/nmi, labels/clusters_used (when the
//   round had true classes), labels/approx_recall, labels/seconds
//   eval/linear_probe_accuracy/model, eval/knn_accuracy/model, and beside them
//   eval/linear_probe_accuracy/<baseline>, eval/knn_accuracy/<baseline> (random-init,
//   raw-pixels).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// <data_dir>/jobs/<id>/tensorboard ("" without a data_dir or id): the job's TensorBoard
// folder, what Job.tensorboard_dir and a TRAIN Assignment.tensorboard_dir hold (rank 0 of the
// training gang writes the run train/ in it; worker/train/training_curves.h).
std::string TensorboardDir(const std::string& data_dir, const std::string& job_id);

// Both write nothing for an empty tensorboard_dir. Errors name the file; a caller logs them
// (a job does not fail for its curves).
// The clustering and label-quality figures of an assigned round.
Status WriteRoundScalars(const std::string& tensorboard_dir, const v1::RoundStatus& round);

// The job's evaluation with its baselines, at optimizer step `step`.
Status WriteEvaluationScalars(const std::string& tensorboard_dir, int64_t step,
                              const v1::EvaluationResult& evaluation);

}  // namespace mlcd::coordinator
