// The coordinator's core: the user and worker API and the jobs' persisted state machine.
// The gRPC service (service.h) is a thin layer over this class.
//
// A job moves through
//   PENDING -> CLUSTERING -> ASSIGNING -> TRAINING -> [EXTRACTING -> CLUSTERING -> ...]
//           -> EVALUATING -> SUCCEEDED | FAILED | CANCELLED
// (round 0 with features.kind "model" starts with EXTRACTING; a job with a given label set,
// clustering.label_set, goes from PENDING straight to TRAINING on it, one round; so does a
// job of loss.variant infonce, which needs no labels. An MCL job (spec.mcl, docs/mcl.md) runs
//   PENDING -> TRAINING (stage 0) -> EXTRACTING -> CLUSTERING -> ASSIGNING (its set s0)
//           -> TRAINING (stage 1) -> ... -> ASSIGNING (the last stage's set) -> EVALUATING ...
// with round j = stage j: each stage is clustered after it trained). Every transition, gang start
// and abort and epoch commit is written to the store (synced) before the coordinator acts on
// it. After a restart, jobs are reloaded: phases without workers (clustering, assignment)
// are redone from their start (their outputs are replaced, never duplicated); a running gang
// is reattached when its workers keep heartbeating its assignments within the job's
// heartbeat timeout, and restarted from the last committed checkpoint otherwise.
//
// Gangs (gang_scheduler.h): a phase that needs workers (TRAIN epochs of a round, EXTRACT features,
// EVALUATE) starts when enough idle workers that can run it are registered, in job submission order
// (FIFO: a job waiting for idle workers holds back the jobs behind it; a job that needs more
// workers than are registered for its kind cannot start and does not). Rank 0's host and
// the rendezvous port it offered in its latest poll form the rendezvous address. A member
// that misses heartbeats for spec.training.heartbeat_timeout_seconds, reports failure, or
// asks for new work while assigned aborts the gang: the others get ABORT in their next
// heartbeat, the job's restart count goes up (FAILED past spec.training.max_restarts), and
// the phase starts again from the last committed checkpoint. A restart uses the full
// world_size when that many workers are idle; after waiting heartbeat_timeout_seconds with
// fewer, it uses the largest number available that divides batch_size (the worker contract
// makes a resumed run take the same samples and steps on any world size).
//
// Commit points (progress_tracker.h): an epoch is committed when rank 0 reports (heartbeat or final
// report) the checkpoint written at the end of that epoch; mid-epoch checkpoints are committed as
// resume points. A restarted gang resumes from the latest committed checkpoint, so no committed
// epoch runs twice.
//
// The parts, each owned here and calling only down (none calls the JobManager):
//   JobTable        job_table.h        the jobs in memory; persisting and watch wake-ups
//   WorkerRegistry  worker_registry.h  registration and liveness of workers
//   GangScheduler   gang_scheduler.h   gang starts, assignments, aborts' bookkeeping
//   ProgressTracker progress_tracker.h rank 0's progress and checkpoint commits
//   PhaseRunner     phase_runner.h     the clusterd phases on their own threads
//   input_checks.h                     checks of specs and RPC fields
// The JobManager alone changes a job's state (Transition) and decides what a phase's end,
// a gang's end or abort, or an unrunnable job leads to.
//
// Locking: one mutex, mu_, guards all coordinator state: the JobManager's own fields and
// everything in the parts above (they have no mutex of their own and are called with mu_
// held). RPC handlers and the scheduler thread take mu_; phase threads take it to publish
// progress and to hand in their outcome. mu_ is released while a WatchJob sends, while
// GetAssignment and WatchJob wait (work_cv_, watch_cv_), while the scheduler thread sleeps
// (tick_cv_) and while phase threads call clusterd. The store is RocksDB, safe to use from
// any thread: GetJob reads history without mu_, as before.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/data_roots.h"
#include "common/job_spec.h"
#include "common/limits.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "coordinator/gang_scheduler.h"
#include "coordinator/job_entry.h"
#include "coordinator/job_table.h"
#include "coordinator/metrics.h"
#include "coordinator/phase_runner.h"
#include "coordinator/progress_tracker.h"
#include "coordinator/store.h"
#include "coordinator/watch_streams.h"
#include "coordinator/worker_registry.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

struct JobManagerOptions {
  // Where the database (db/), round-0 features (features/, written by clusterd) and per-job
  // files (jobs/<id>/: centroids, extracted features, default checkpoints, evaluation) live.
  std::string data_dir;
  // Every path a job spec names must resolve under these (common/data_roots.h); none given =
  // DataRoots::FromFlags' default (data_dir and /usr/share/datasets).
  std::vector<std::string> data_roots;
  // Folders no spec path may name even under a root (--private-dir: other services' state);
  // the coordinator's own db/, backups/ and tls-private/ under data_dir are always private.
  std::vector<std::string> private_dirs;
  // mlcd-labelstore address handed to workers (clusterd writes to its own --labelstore).
  std::string labelstore_address = "127.0.0.1:7610";
  // mlcd-clusterd address for the CLUSTERING and ASSIGNING phases.
  std::string clusterd_address = "127.0.0.1:7620";
  // How often workers heartbeat while running an assignment.
  std::chrono::milliseconds heartbeat_interval{1000};
  // An idle worker that has not polled for this long is marked LOST (not given work)...
  std::chrono::milliseconds idle_worker_timeout{30000};
  // ... and forgotten after this long.
  std::chrono::milliseconds lost_worker_expiry{std::chrono::minutes(10)};
  // A dead worker's name stays bound to the identity that registered it this long after it
  // was last heard from (worker_registry.h; --worker-name-lease-seconds).
  std::chrono::milliseconds worker_name_lease{std::chrono::seconds(kDefaultWorkerNameLeaseSeconds)};
  // Period of the scheduler loop (liveness checks, phase starts).
  std::chrono::milliseconds tick{200};
  // Longest GetAssignment long poll.
  int max_poll_seconds = 60;
  // WatchJob streams open at once, in all and of one caller identity (watch_streams.h); more
  // are RESOURCE_EXHAUSTED.
  int max_watch_streams = kDefaultMaxWatchStreams;
  int max_watch_streams_per_identity = kDefaultMaxWatchStreamsPerIdentity;
  // The space reserve on data_dir's file system (store.h; --min-free-mb): below it the
  // coordinator does not start, and SubmitJob and RegisterWorker are UNAVAILABLE.
  uint64_t min_free_bytes = kCoordinatorMinFreeBytes;
  // The file layer of the database (null = the default; tests play a full disk with it).
  std::shared_ptr<rocksdb::Env> env;
};

class JobManager {
 public:
  // Opens the store under options.data_dir/db and reloads jobs and workers. A failure
  // (including no space to open the database or to record the reload) is returned, never an
  // abort: nothing was acted on yet.
  static StatusOr<std::unique_ptr<JobManager>> Open(JobManagerOptions options,
                                                    CoordinatorMetrics* metrics);
  ~JobManager();

  // Starts the scheduler thread.
  void Start();
  // Wakes every long poll and watch (they return), cancels clustering calls in flight and
  // joins the threads. Persisted state is untouched: a restart picks up where this left.
  void Shutdown();

  // --- users ---
  // `caller`: the submitting identity (Principal::identity, common/security.h), recorded as
  // the job's submitted_by; request ids are looked up and recorded under it, so the same
  // request id from two identities names two jobs.
  // With clustering.label_set, the set is checked in the label store (given_label_set.h) and
  // must be one `caller` may train on (CheckGivenLabelSetOwner; `admin`: any).
  StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request, const std::string& caller,
                              bool admin = false);
  StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request);
  StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  // PERMISSION_DENIED when `caller` did not submit the job and `any_job` (admin) is false.
  StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request, const std::string& caller,
                              bool any_job);
  // Sends the job now, then on every change until it ends (OK), `is_cancelled()` turns true
  // (CANCELLED) or the manager shuts down (UNAVAILABLE). `send` returning false ends it.
  // RESOURCE_EXHAUSTED when `caller` (the calling identity) or everyone together has the most
  // streams open (watch_streams.h).
  Status WatchJob(const v1::WatchJobRequest& request, const std::string& caller,
                  const std::function<bool(const v1::JobEvent&)>& send,
                  const std::function<bool()>& is_cancelled);

  // --- workers (worker_api.cc) ---
  // `caller` is the calling identity. A worker name is bound to the identity that registered
  // it: re-registering a live worker, polling, heartbeating or reporting for it from another
  // identity, or reporting an assignment the worker was not given, is PERMISSION_DENIED.
  StatusOr<v1::RegisterWorkerResponse> RegisterWorker(const v1::RegisterWorkerRequest& request,
                                                      const std::string& caller);
  StatusOr<v1::Assignment> GetAssignment(const v1::GetAssignmentRequest& request,
                                         const std::string& caller,
                                         const std::function<bool()>& is_cancelled);
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                            const std::string& caller);
  StatusOr<v1::ReportAssignmentResponse> ReportAssignment(
      const v1::ReportAssignmentRequest& request, const std::string& caller);
  StatusOr<v1::ListWorkersResponse> ListWorkers(const v1::ListWorkersRequest& request);
  // A stopping agent leaves (worker_api.cc): its entry goes; an assignment it still holds
  // aborts its gang without counting a restart. Unknown workers are OK (idempotent).
  StatusOr<v1::DeregisterWorkerResponse> DeregisterWorker(
      const v1::DeregisterWorkerRequest& request, const std::string& caller);
  // Cordons (or, with undo, uncordons) a worker; a running TRAIN assignment is told to stop
  // at a checkpoint by its next heartbeat (WORKER_ACTION_STOP). NOT_FOUND for unknown ids.
  StatusOr<v1::DrainWorkerResponse> DrainWorker(const v1::DrainWorkerRequest& request);

  // --- administrators (state_backup.cc) ---
  // Checkpoints the store into a fresh directory under <data-dir>/backups, hands `send` its
  // files in chunks (stops when `send` returns false: CANCELLED), and removes the directory.
  Status BackupState(const std::function<bool(const v1::BackupChunk&)>& send);

 private:
  JobManager(JobManagerOptions options, CoordinatorMetrics* metrics,
             std::unique_ptr<CoordinatorStore> store);
  Status Load() LOCKS_EXCLUDED(mu_);
  void Recover(JobEntry* job, Clock::time_point now, int* recovered) REQUIRES(mu_);

  void SchedulerLoop() LOCKS_EXCLUDED(mu_);
  void Tick() REQUIRES(mu_);
  void ApplyPhaseOutcomes() REQUIRES(mu_);
  void AdvanceJobs(Clock::time_point now) REQUIRES(mu_);
  // Counts and persists the phase attempt, then launches it; fails the job instead when
  // kMaxCrashedPhaseAttempts attempts died before.
  void LaunchPhase(JobEntry* job) REQUIRES(mu_);

  // State machine (all with mu_ held). Each persists before returning; a failed write is
  // fatal for the coordinator (state on disk would no longer match what it does).
  // `before`: history entries written in the same batch ahead of the transition's own (a
  // gang abort that leads to it), so a crash never persists one without the other.
  void Transition(JobEntry* job, v1::JobState state, const std::string& message,
                  std::vector<v1::JobHistoryEntry> before = {}) REQUIRES(mu_);
  // Aborts the running gang and persists it (with the FAILED that follows when it uses up
  // max_restarts, in the same write).
  void AbortGang(JobEntry* job, const std::string& reason, bool counts_as_restart) REQUIRES(mu_);
  // Ends an unfinished job FAILED or CANCELLED; aborting its gang is part of the same write.
  void EndJob(JobEntry* job, v1::JobState state, const std::string& message) REQUIRES(mu_);
  void FailJob(JobEntry* job, const std::string& message) REQUIRES(mu_);
  // Every member of the gang reported success: the round is trained, the features extracted
  // or the evaluation done.
  void FinishGang(JobEntry* job) REQUIRES(mu_);
  void AfterRoundTrained(JobEntry* job) REQUIRES(mu_);
  // clustering.engine "gang" (gang_clustering.cc): a CLUSTER gang's rank 0 result becomes the
  // round's clustering and the job moves to ASSIGNING; after an ASSIGN_LABELS gang the round's
  // labels are written and the sealing phase thread runs next.
  void FinishClusteringGang(JobEntry* job, const v1::GangAttempt& attempt) REQUIRES(mu_);
  // A member reported success, or that it stopped at a checkpoint
  // (ReportAssignmentRequest.preempted; worker_api.cc). Once every member has reported:
  // all succeeded -> FinishGang; some stopped -> the gang is detached without counting a
  // restart and formed again from the committed checkpoint.
  void MemberDone(JobEntry* job, int rank, const v1::ReportAssignmentRequest& request)
      REQUIRES(mu_);
  // The long poll: waits (mu_ released) until the worker has an assignment, the deadline
  // passes, the client gives up or the manager shuts down.
  StatusOr<v1::Assignment> WaitForAssignment(WorkerEntry* worker, Clock::time_point deadline,
                                             const std::function<bool()>& is_cancelled,
                                             MutexLock* lock) REQUIRES(mu_);
  void UpdateGauges() REQUIRES(mu_);
  // phases_ was given mu_ as its lock, which the analysis knows only as phases_.mutex():
  // called with mu_ held, tells it that one is held too (checks nothing at run time). The
  // assertion lasts to the end of the calling function, past Shutdown()'s unlock, so
  // PhaseRunner::JoinAll() says "call without the mutex" in prose, not LOCKS_EXCLUDED.
  void AssertPhasesHeld() const REQUIRES(mu_) ASSERT_CAPABILITY(phases_.mutex()) {}

  JobManagerOptions options_;
  CoordinatorMetrics* metrics_;
  std::unique_ptr<CoordinatorStore> store_;

  Mutex mu_;
  std::condition_variable work_cv_;   // assignments for long polls, shutdown
  std::condition_variable watch_cv_;  // job changes for WatchJob
  std::condition_variable tick_cv_;   // wakes the scheduler early
  bool shutting_down_ GUARDED_BY(mu_) = false;
  int64_t next_job_seq_ GUARDED_BY(mu_) = 1;
  JobTable jobs_ GUARDED_BY(mu_);
  WorkerRegistry workers_ GUARDED_BY(mu_);
  GangScheduler gangs_ GUARDED_BY(mu_);
  ProgressTracker progress_ GUARDED_BY(mu_);
  // Uses mu_ as its own lock (phase_runner.h; AssertPhasesHeld): called with mu_ held except
  // JoinAll(), which Shutdown() calls without it; so no GUARDED_BY here.
  PhaseRunner phases_;

  std::thread scheduler_;
  // The paths job specs may name (set once in Open).
  DataRoots data_roots_;
  WatchStreamLimits watch_streams_;
};

}  // namespace mlcd::coordinator
