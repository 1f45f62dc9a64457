// What rank 0 of a running gang reports (heartbeats and its final report): the job's visible
// progress and the checkpoints it commits.
//
// Commit points: an epoch is committed when rank 0 reports the checkpoint written at the end
// of that epoch (an epoch end also commits earlier epochs of the gang whose own checkpoint
// event was not seen); mid-epoch checkpoints are committed as resume points. Every commit is
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

#include "coordinator/job_entry.h"
#include "coordinator/job_table.h"
#include "coordinator/metrics.h"

namespace mlcd::coordinator {

class ProgressTracker {
 public:
  // Both outlive the tracker.
  ProgressTracker(JobTable* jobs, CoordinatorMetrics* metrics) : jobs_(jobs), metrics_(metrics) {}

  // Rank 0's progress of the job's running gang: updates the visible progress (step, loss,
  // ETA, detail), then commits the checkpoint it names when that is newer.
  void OnRankZeroProgress(JobEntry* job, const v1::WorkerProgress& progress, Clock::time_point now);

 private:
  void UpdateProgress(JobEntry* job, const v1::WorkerProgress& progress, Clock::time_point now);
  void UpdateStepRate(JobEntry* job, int64_t step, Clock::time_point now);
  void MaybeCommitCheckpoint(JobEntry* job, const v1::WorkerProgress& progress);
  void MaybeRecordRoundSteps(JobEntry* job, const v1::WorkerProgress& progress);

  JobTable* jobs_;
  CoordinatorMetrics* metrics_;
};

}  // namespace mlcd::coordinator
