// The coordinator's in-memory records of one job and one worker, and the names people read
// in messages. Plain data: JobTable owns the jobs, WorkerRegistry the workers, and every
// read or write of them happens with the JobManager's mutex held (job_manager.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::clusterd {
class CallControl;
}

namespace mlcd::coordinator {

using Clock = std::chrono::steady_clock;

struct WorkerEntry {
  v1::WorkerRecord record;
  v1::WorkerState state = v1::WORKER_STATE_IDLE;
  Clock::time_point last_seen;
  int64_t last_seen_unix_ms = 0;
  // Rendezvous port offered in the latest poll.
  int offered_port = 0;
  // GetAssignment calls of this worker waiting right now.
  int polls_waiting = 0;
  // Assignment made but not yet handed out by a poll.
  std::optional<v1::Assignment> pending;
  bool delivered = false;
  std::string job_id;
  std::string assignment_id;
  int rank = -1;
  v1::WorkerProgress progress;

  bool Supports(v1::AssignmentKind kind) const {
    const auto& kinds = record.registration().kinds();
    if (kinds.empty()) return kind == v1::ASSIGNMENT_KIND_TRAIN;
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  }
};

// The right to write a round's OPEN label set that the label store delegated to the job
// (LabelStore.DelegateWrites): the coordinator mints each labelling rank's write capability
// from it (clients/write_capability.h). A secret, so it is kept in memory only: after a
// restart the coordinator makes the set again, and asks again, before the gang starts.
struct LabelWriteDelegation {
  std::string label_set;
  uint64_t incarnation = 0;
  std::string key;
};

struct JobEntry {
  // What is persisted (store.h): the public job, its gang attempt and bookkeeping.
  v1::JobRecord rec;
  // Gang engine, ASSIGNING: the delegation of the round's set (none = not asked yet).
  std::optional<LabelWriteDelegation> label_writes;
  // Bumped on every visible change (WatchJob).
  uint64_t version = 1;
  // Bumped on every transition: results of phase threads started before it are dropped.
  uint64_t phase_generation = 0;
  bool phase_running = false;
  // Cancels the clusterd call of the running phase.
  std::shared_ptr<clusterd::CallControl> control;
  Clock::time_point retry_after{};
  int transient_failures = 0;
  // Last heartbeat (or report, or gang start) per assignment of the running gang.
  std::map<std::string, Clock::time_point> member_last_heard;
  // Elastic restarts: since when fewer than world_size workers are available.
  std::optional<Clock::time_point> short_since;
  // Step rate for the ETA.
  Clock::time_point rate_time{};
  int64_t rate_step = -1;
  double steps_per_second = 0;
  Clock::time_point state_entered;
  // The last checkpoint path rank 0 reported outside the job's checkpoint root, and how many
  // such paths the job's history records (progress_tracker.h).
  std::string refused_checkpoint;
  int checkpoint_refusals = 0;

  v1::Job& job() { return *rec.mutable_job(); }
  const v1::Job& job() const { return rec.job(); }
  v1::JobState state() const { return rec.job().state(); }
  const v1::JobSpec& spec() const { return rec.job().spec(); }
  // The current (last) round, or null before round 0 starts.
  v1::RoundStatus* round() {
    return job().rounds_size() ? job().mutable_rounds(job().rounds_size() - 1) : nullptr;
  }
  const v1::RoundStatus* round() const {
    return job().rounds_size() ? &job().rounds(job().rounds_size() - 1) : nullptr;
  }
};

bool IsTerminal(v1::JobState state);
// "TRAINING" for JOB_STATE_TRAINING.
std::string StateName(v1::JobState state);
// "train", "extract (mlcd-worker embed)", "evaluate (mlcd-worker eval)", "none".
std::string KindName(v1::AssignmentKind kind);
// "idle", "busy", "draining", "lost", "unknown".
std::string WorkerStateName(v1::WorkerState state);
// People count rounds and epochs from 1 ("round 2/3"); names and the API count from 0.
std::string RoundText(int r, int rounds);

// The epoch a training gang's round ends at: `end_epoch`, or with a time budget the epochs
// its recorded step count spans (RoundStatus.round_epochs; the last may be partial).
int RoundEndEpoch(const v1::RoundStatus& round, int end_epoch);
// Why a job FAILED when its gang failed more often than spec.training.max_restarts allows.
std::string RestartsExhausted(int restarts, int max_restarts, const std::string& last_failure);
// Per-job files: <data_dir>/jobs/<job_id> (centroids, extracted features, default
// checkpoints, evaluation).
std::string JobDir(const std::string& data_dir, const std::string& job_id);
// The label set a job's round r writes (owned by job:<job_id>): "job/<job_id>/r<r>", the
// labels round r trains on; for an MCL job "job/<job_id>/s<r>", the clustering of stage r's
// embeddings after it trained (docs/mcl.md).
std::string RoundLabelSet(const v1::Job& job, int r);
// The spec is an MCL job (spec.mcl present): round r is stage r, trained first and then
// clustered; the next stage trains on the earlier stages' sets (Assignment.pseudo_label_sets).
bool IsMcl(const v1::JobSpec& spec);
// The job's loss needs no labels (loss.variant "infonce", MCL or not): round 0 trains without
// CLUSTERING and ASSIGNING.
bool TrainsWithoutLabels(const v1::JobSpec& spec);
// "stage 2/3" (people count from 1).
std::string StageText(int j, int stages);
// The kind of gang the job's state needs (NONE for states without workers).
v1::AssignmentKind KindFor(const JobEntry& job);
// The spec's clustering.engine is "gang": CLUSTERING and ASSIGNING run on the job's workers
// (CLUSTER and ASSIGN_LABELS gangs), between the coordinator's phase threads that plan the
// round, create the OPEN label set and seal it (phase_runner.h).
bool GangClusters(const v1::JobSpec& spec);

}  // namespace mlcd::coordinator
