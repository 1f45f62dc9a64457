// What rank 0 of a running gang reports (heartbeats and its final report): the job's visible
// progress and the checkpoints it commits.
//
// Commit points: an epoch is committed when rank 0 reports the checkpoint written at the end
// of that epoch (an epoch end also commits earlier epochs of the gang whose own checkpoint
// event was not seen); mid-epoch checkpoints are committed as resume points. Only a
// checkpoint inside the job's checkpoint root (JobCheckpointDir, the root its TRAIN
// assignments are given; coordinator/checkpoint_dirs.h) is committed: any other path rank 0
// names is ignored, logged and recorded in the job's history ("checkpoint_refused"), so no
// gang can point a job's resume point, evaluation or export elsewhere. Every commit is
// persisted with its history entries before the call returns. A restarted gang resumes from
// the latest committed checkpoint, so no committed epoch runs twice.
//
// training.time_budget_minutes: the first step count a gang reports for a round
// (WorkerProgress.round_steps) is recorded on the round with the epochs it spans and
// persisted; later gangs of the round get it back (Assignment.round_steps), and the round is
// trained once that many epochs (the last may be partial) are committed.
//
// Locking: no mutex of its own. Every method runs with the JobManager's mutex held.
#pragma once

#include <string>

#include "coordinator/job_entry.h"
#include "coordinator/job_table.h"
#include "coordinator/metrics.h"

namespace mlcd::coordinator {

class ProgressTracker {
 public:
  // Both outlive the tracker. `data_dir`: the coordinator's, which holds the jobs' default
  // checkpoint roots.
  ProgressTracker(JobTable* jobs, CoordinatorMetrics* metrics, std::string data_dir)
      : jobs_(jobs), metrics_(metrics), data_dir_(std::move(data_dir)) {}

  // Rank 0's progress of the job's running gang: updates the visible progress (step, loss,
  // ETA, detail), then commits the checkpoint it names when that is newer.
  void OnRankZeroProgress(JobEntry* job, const v1::WorkerProgress& progress, Clock::time_point now);

 private:
  void UpdateProgress(JobEntry* job, const v1::WorkerProgress& progress, Clock::time_point now);
  void UpdateStepRate(JobEntry* job, int64_t step, Clock::time_point now);
  void MaybeCommitCheckpoint(JobEntry* job, const v1::WorkerProgress& progress);
  // A reported checkpoint outside `dir`: logged and recorded once per path (at most
  // kMaxCheckpointRefusalsRecorded entries per job while the coordinator runs).
  void RefuseCheckpoint(JobEntry* job, const std::string& reported, const std::string& dir);
  void MaybeRecordRoundSteps(JobEntry* job, const v1::WorkerProgress& progress);

  JobTable* jobs_;
  CoordinatorMetrics* metrics_;
  std::string data_dir_;
};

}  // namespace mlcd::coordinator
