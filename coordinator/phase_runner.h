// The phases without workers: CLUSTERING (Clusterd.Cluster) and ASSIGNING (Clusterd.Assign),
// or, with clustering.engine "gang", the coordinator's parts around the workers' CLUSTER and
// ASSIGN_LABELS gangs (planning the round's features; sealing the label set they wrote),
// each run on a thread of its own (clusterd calls can take minutes) through clusterd's client
// library. The coordinator writes no features itself: round-0 pixels / random-projection
// features are described in the ClusterRequest (FeatureSource.generate) and clusterd writes
// them, once, into <data_dir>/features/<dataset-kind-dim-seed-limit-hash>/ (a cache shared
// by jobs); `npy` features and extracted shards are sent as paths.
//
// A phase thread works on a snapshot of the job record and only reports back: progress
// details while it runs (when its job is still in the phase it was started for), and one
// PhaseOutcome when it ends. The JobManager collects outcomes on its scheduler thread and
// applies them (Apply, then its own transition; or HandleError). An outcome of a phase whose
// job has moved on since (a transition bumped phase_generation, the job ended, the
// coordinator shuts down) is dropped: StillCurrent() returns null for it.
//
// Locking: the runner uses the JobManager's mutex (passed in) and has none of its own. It
// guards the runner's members and the job table; the methods that run with it held say
// REQUIRES(mu_). Phase threads take it to publish details and to hand in their outcome.
// JoinAll() must be called without it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/data_roots.h"
#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/job_entry.h"
#include "coordinator/job_table.h"
#include "coordinator/stage_clustering.h"
#include "mlcd/v1/clusterd.pb.h"

namespace mlcd::coordinator {

// Attempts of one CLUSTERING / ASSIGNING phase that may die with the coordinator or clusterd
// before the job fails instead of being resumed into the same crash.
inline constexpr int kMaxCrashedPhaseAttempts = 2;

struct PhaseRunnerOptions {
  // Round-0 features go under <data_dir>/features/, centroids under <data_dir>/jobs/<id>/.
  std::string data_dir;
  // clusterd's Assign writes into its own --labelstore: a request never names one.
  std::string clusterd_address;
  // clustering.engine "gang": the coordinator seals the round's label set here, acting for
  // the job, once every rank of the ASSIGN_LABELS gang has written its rows.
  std::string labelstore_address;
  // The coordinator's data roots (common/data_roots.h): what CLUSTERING lists and reads again
  // (folders of feature shards, their keys, labels beside shards) is confined to them. Null:
  // unconfined. Must outlive the runner.
  const DataRoots* data_roots = nullptr;
};

// How a phase thread ended.
// What a phase thread does, chosen when it is launched.
enum class PhaseKind {
  kCluster,     // clusterd's k-means of the round (CLUSTERING)
  kAssign,      // clusterd's top-l labels of every sample into the round's set (ASSIGNING)
  kPlanRound,   // clustering.engine "gang", CLUSTERING: the round's features, class labels and
                // centroids path, planned for the workers' CLUSTER gang
  kPrepareSet,  // clustering.engine "gang", ASSIGNING: the round's OPEN set (re)created and
                // its writes delegated to the job (`label_writes`), for the ASSIGN_LABELS gang
  kSealSet,     // clustering.engine "gang", ASSIGNING: the set the gang wrote, sealed
  kDeleteSet,   // a partial set of a job that ended in ASSIGNING, deleted (never applied)
};

struct PhaseOutcome {
  std::string job_id;
  uint64_t generation = 0;
  PhaseKind kind = PhaseKind::kCluster;
  LabelWriteDelegation label_writes;
  int round = 0;
  // Not OK: `what` failed with it.
  Status status;
  // clusterd took the call (sent progress): an UNAVAILABLE after that is clusterd dying
  // during the phase, which counts as a crashed attempt.
  bool call_started = false;
  std::string what;
  // CLUSTERING: the round as it is to be stored (features, centroids path, labels path).
  v1::RoundStatus round_record;
  v1::ClusterResult cluster;
  // ASSIGNING: the label set asked for, and the result.
  std::string label_set;
  v1::AssignResult assign;
  // MCL, ASSIGNING done: the stage's cluster sizes and its agreement with the previous stage,
  // read back from the sealed sets (stage_clustering.h).
  std::optional<StageClustering> stage;
};

// The transition an applied outcome leads to.
struct PhaseNext {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::string message;
};

// "round 1/2: clustered N points into k centres in S s[ on W workers]": the history and
// state message of a finished clustering, by clusterd (workers 0) or by a gang.
std::string ClusteredMessage(const std::string& round_text, const v1::ClusterResult& result,
                             int workers = 0);

class PhaseRunner {
 public:
  // `jobs`, `mu` (the JobManager's mutex) and `tick` (notified when a thread ends) outlive
  // the runner.
  PhaseRunner(PhaseRunnerOptions options, JobTable* jobs, Mutex* mu, std::condition_variable* tick);

  // Starts the phase of the job's state (CLUSTERING or ASSIGNING) on a new thread; sets
  // phase_running and the job's call control (cancelled by any transition). The caller has
  // counted and persisted the attempt (JobRecord.phase_attempts) before. A phase thread
  // never lets an exception out: it becomes the outcome's INTERNAL status.
  void Launch(JobEntry* job) REQUIRES(mu_);
  // The phase Launch starts for the job's state (CLUSTERING or ASSIGNING) and engine.
  static PhaseKind KindOfPhase(const JobEntry& job);
  // Joins the threads that ended and returns their outcomes; starts the deletions
  // (DeletePartialSet) whose job has no phase thread running any more.
  std::vector<PhaseOutcome> CollectFinished() REQUIRES(mu_);
  // Gang engine: `label_set`, the round's set of a job that ended FAILED or CANCELLED during
  // ASSIGNING, is partial (or OPEN and empty) and is never sealed: it is deleted, acting for
  // the job, on a thread of its own once no phase thread of that job runs any more (a
  // preparing thread could create it again after the deletion; a sealing one could seal it).
  // The job's end does not wait for it; a failure is logged with the set's name. Not
  // persisted: a coordinator that stops first leaves the set (delete it with mlcdctl).
  void DeletePartialSet(const std::string& job_id, const std::string& label_set) REQUIRES(mu_);
  // The job when it is still in the phase `generation` was started for, else null.
  JobEntry* StillCurrent(const std::string& job_id, uint64_t generation) REQUIRES(mu_);
  // Stores a successful outcome in the job's round; returns the transition that follows
  // (state UNSPECIFIED: none, the job stays in its state: a round planned for the gang).
  PhaseNext Apply(JobEntry* job, const PhaseOutcome& outcome) REQUIRES(mu_);
  // After a failed phase: clears the running phase; a transient status (clusterd restarting
  // or busy, the call cancelled) schedules a retry with backoff (1, 2, 4 ... 32 s) and
  // returns true; otherwise returns false and the caller fails the job. The attempt stays
  // counted (JobRecord.phase_attempts) only when clusterd died during the call.
  bool HandleError(JobEntry* job, const PhaseOutcome& outcome) REQUIRES(mu_);

  // Outcomes and details from now on are dropped.
  void BeginShutdown() REQUIRES(mu_) { stopping_ = true; }
  bool idle() const REQUIRES(mu_) { return threads_.empty(); }
  // Joins every phase thread (call without the mutex; after BeginShutdown).
  void JoinAll();
  // The mutex passed in, so that the owner can name it in annotations.
  Mutex* mutex() const RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  struct Slot;
  struct PhaseThread {
    std::thread thread;
    std::shared_ptr<Slot> slot;
  };

  // Runs `body` on a new thread that fills the slot's outcome (an exception becomes its
  // INTERNAL status) and marks the slot done.
  void StartThread(std::shared_ptr<Slot> slot, std::function<void(PhaseOutcome*)> body)
      REQUIRES(mu_);
  // A phase or deletion thread of the job has not ended yet.
  bool Running(const std::string& job_id) const REQUIRES(mu_);
  // Starts the pending deletions whose job has no thread running.
  void LaunchDeletions() REQUIRES(mu_);
  void RunClustering(const v1::JobRecord& snapshot, clusterd::CallControl* control,
                     PhaseOutcome* outcome);
  void RunAssigning(const v1::JobRecord& snapshot, clusterd::CallControl* control,
                    PhaseOutcome* outcome);
  // The round as CLUSTERING stores it: features planned (PlanFeatures), the folder made, the
  // class labels of extracted shards gathered, the centroids path chosen.
  Status PlanRound(const v1::JobRecord& snapshot, int r, v1::FeatureSource* source,
                   v1::RoundStatus* round) const;
  // Gang engine, ASSIGNING, before the gang: deletes what an earlier attempt left of the
  // round's set and creates it OPEN (acting for the job).
  void RunPreparingSet(const v1::JobRecord& snapshot, PhaseOutcome* outcome);
  // Gang engine, ASSIGNING: seals the set the gang wrote and checks that it holds every row.
  void RunSealing(const v1::JobRecord& snapshot, PhaseOutcome* outcome);
  // MCL, after a successful ASSIGNING: fills outcome->stage from the stage's sealed set and
  // the previous stage's (a failure fails the phase like a failed read of the set).
  void SummariseStage(const v1::JobRecord& snapshot, PhaseOutcome* outcome);
  // MCL, the stage's clustering applied: the next stage's round (TRAINING), or the end.
  PhaseNext AfterStageClustered(JobEntry* job, const PhaseOutcome& outcome) REQUIRES(mu_);
  // The feature source of round r's ClusterRequest; fills the round's feature paths, class
  // labels and source description when the round had none.
  Status PlanFeatures(const v1::JobSpec& spec, int r, const std::string& round_dir,
                      v1::RoundStatus* round, v1::FeatureSource* source) const;
  // Sets the job's progress detail if the phase is still current (takes the mutex).
  void Publish(const PhaseOutcome& phase, const std::string& detail) LOCKS_EXCLUDED(mu_);

  PhaseRunnerOptions options_;
  JobTable* jobs_ PT_GUARDED_BY(mu_);
  Mutex* mu_;
  std::condition_variable* tick_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<PhaseThread> threads_ GUARDED_BY(mu_);
  struct PendingDeletion {
    std::string job_id;
    std::string label_set;
  };
  std::vector<PendingDeletion> pending_deletions_ GUARDED_BY(mu_);
};

}  // namespace mlcd::coordinator
