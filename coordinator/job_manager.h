// The coordinator's core: jobs, their persisted state machine, worker registry, gangs and
// failure handling. The gRPC service (service.h) is a thin layer over this class.
//
// A job moves through
//   PENDING -> CLUSTERING -> ASSIGNING -> TRAINING -> [EXTRACTING -> CLUSTERING -> ...]
//           -> EVALUATING -> SUCCEEDED | FAILED | CANCELLED
// (round 0 with features.kind "model" starts with EXTRACTING). Every transition, gang start
// and abort and epoch commit is written to the store (synced) before the coordinator acts on
// it. After a restart, jobs are reloaded: phases without workers (clustering, assignment)
// are redone from their start (their outputs are replaced, never duplicated); a running gang
// is reattached when its workers keep heartbeating its assignments within the job's
// heartbeat timeout, and restarted from the last committed checkpoint otherwise.
//
// Gangs: a phase that needs workers (TRAIN epochs of a round, EXTRACT features, EVALUATE)
// starts when enough idle workers that can run it are registered, in job submission order
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
// Commit points: an epoch is committed when rank 0 reports (heartbeat or final report) the
// checkpoint written at the end of that epoch; mid-epoch checkpoints are committed as resume
// points. A restarted gang resumes from the latest committed checkpoint, so no committed
// epoch runs twice.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "coordinator/metrics.h"
#include "coordinator/store.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::clusterd {
class CallControl;
}

namespace mlcd::coordinator {

struct JobManagerOptions {
  // Where the database (db/), round-0 features (features/) and per-job files (jobs/<id>/:
  // centroids, extracted features, default checkpoints, evaluation) live.
  std::string data_dir;
  // mlcd-labelstore address handed to workers and to clusterd's Assign.
  std::string labelstore_address = "127.0.0.1:7610";
  // mlcd-clusterd address for the CLUSTERING and ASSIGNING phases.
  std::string clusterd_address = "127.0.0.1:7620";
  // How often workers heartbeat while running an assignment.
  std::chrono::milliseconds heartbeat_interval{1000};
  // An idle worker that has not polled for this long is marked LOST (not given work)...
  std::chrono::milliseconds idle_worker_timeout{30000};
  // ... and forgotten after this long.
  std::chrono::milliseconds lost_worker_expiry{std::chrono::minutes(10)};
  // Period of the scheduler loop (liveness checks, phase starts).
  std::chrono::milliseconds tick{200};
  // Longest GetAssignment long poll.
  int max_poll_seconds = 60;
};

class JobManager {
 public:
  // Opens the store under options.data_dir/db and reloads jobs and workers.
  static StatusOr<std::unique_ptr<JobManager>> Open(JobManagerOptions options,
                                                    CoordinatorMetrics* metrics);
  ~JobManager();

  // Starts the scheduler thread.
  void Start();
  // Wakes every long poll and watch (they return), cancels clustering calls in flight and
  // joins the threads. Persisted state is untouched: a restart picks up where this left.
  void Shutdown();

  // --- users ---
  StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request);
  StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request);
  StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request);
  // Sends the job now, then on every change until it ends (OK), `is_cancelled()` turns true
  // (CANCELLED) or the manager shuts down (UNAVAILABLE). `send` returning false ends it.
  Status WatchJob(const v1::WatchJobRequest& request,
                  const std::function<bool(const v1::JobEvent&)>& send,
                  const std::function<bool()>& is_cancelled);

  // --- workers ---
  StatusOr<v1::RegisterWorkerResponse> RegisterWorker(const v1::RegisterWorkerRequest& request);
  StatusOr<v1::Assignment> GetAssignment(const v1::GetAssignmentRequest& request,
                                         const std::function<bool()>& is_cancelled);
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  StatusOr<v1::ReportAssignmentResponse> ReportAssignment(
      const v1::ReportAssignmentRequest& request);
  StatusOr<v1::ListWorkersResponse> ListWorkers(const v1::ListWorkersRequest& request);

 private:
  struct WorkerEntry;
  struct JobEntry;
  using Clock = std::chrono::steady_clock;

  JobManager(JobManagerOptions options, CoordinatorMetrics* metrics);
  Status Load();

  void SchedulerLoop();
  void Tick();
  void CheckWorkers(Clock::time_point now);
  void CheckGangs(Clock::time_point now);
  void AdvanceJobs(Clock::time_point now);
  void ScheduleGangs(Clock::time_point now);
  void JoinFinishedThreads();

  // State machine (all with mu_ held). Each persists before returning; a failed write is
  // fatal for the coordinator (state on disk would no longer match what it does).
  // `before`: history entries written in the same batch ahead of the transition's own (a
  // gang abort that leads to it), so a crash never persists one without the other.
  void Transition(JobEntry* job, v1::JobState state, const std::string& message,
                  std::vector<v1::JobHistoryEntry> before = {});
  void Persist(JobEntry* job, std::vector<v1::JobHistoryEntry> history = {});
  v1::JobHistoryEntry NewHistory(JobEntry* job, const std::string& kind,
                                 const std::string& message = "");
  void Touch(JobEntry* job);
  void StartGang(JobEntry* job, v1::AssignmentKind kind, std::vector<WorkerEntry*> workers);
  // Aborts the running gang and persists it (with the FAILED that follows when it uses up
  // max_restarts, in the same write).
  void AbortGang(JobEntry* job, const std::string& reason, bool counts_as_restart);
  // The in-memory part of an abort (members told ABORT, undelivered assignments withdrawn);
  // returns the history entry for the caller to persist with what follows.
  v1::JobHistoryEntry DetachGang(JobEntry* job, const std::string& reason, bool counts_as_restart);
  // Ends an unfinished job FAILED or CANCELLED; aborting its gang is part of the same write.
  void EndJob(JobEntry* job, v1::JobState state, const std::string& message);
  void FinishGang(JobEntry* job);
  void MaybeCommitCheckpoint(JobEntry* job, const v1::WorkerProgress& progress);
  void UpdateProgress(JobEntry* job, const v1::WorkerProgress& progress, Clock::time_point now);
  void AfterRoundTrained(JobEntry* job);
  void FailJob(JobEntry* job, const std::string& message);

  // Phases run on their own threads (clusterd calls can take minutes).
  void LaunchPhase(JobEntry* job);
  void RunClusteringPhase(std::string job_id, uint64_t phase_generation, v1::JobRecord snapshot,
                          std::shared_ptr<clusterd::CallControl> control);
  void RunAssigningPhase(std::string job_id, uint64_t phase_generation, v1::JobRecord snapshot,
                         std::shared_ptr<clusterd::CallControl> control);
  // Applies the outcome of a phase thread (mu_ held by the caller).
  JobEntry* PhaseStillCurrent(const std::string& job_id, uint64_t phase_generation);
  void PhaseError(JobEntry* job, const std::string& what, const Status& status);

  // Helpers (mu_ held).
  JobEntry* FindJob(const std::string& id);
  WorkerEntry* FindWorker(const std::string& id);
  bool WorkerAlive(const WorkerEntry& worker, Clock::time_point now) const;
  v1::AssignmentKind KindFor(const JobEntry& job) const;
  int WantedGangSize(JobEntry* job, int available, Clock::time_point now);
  // Sets the job's progress detail; watchers hear of it when it changed.
  void SetDetail(JobEntry* job, const std::string& detail);
  Status CheckWorkerSupport(const v1::JobSpec& spec) const;
  v1::Job PublicJob(const JobEntry& job) const;
  std::string JobDir(const std::string& job_id) const;
  void UpdateGauges();
  void ReleaseWorker(WorkerEntry* worker);

  JobManagerOptions options_;
  CoordinatorMetrics* metrics_;
  std::unique_ptr<CoordinatorStore> store_;

  std::mutex mu_;
  std::condition_variable work_cv_;   // assignments for long polls, shutdown
  std::condition_variable watch_cv_;  // job changes for WatchJob
  std::condition_variable tick_cv_;   // wakes the scheduler early
  bool shutting_down_ = false;
  int64_t next_job_seq_ = 1;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  std::map<std::string, std::unique_ptr<WorkerEntry>> workers_;
  // assignment id -> job id, for the gangs running now.
  std::map<std::string, std::string> assignment_jobs_;
  // Why recently aborted assignments were stopped (told to their workers); bounded.
  std::map<std::string, std::string> abort_reasons_;
  std::vector<std::string> abort_order_;

  std::thread scheduler_;
  struct PhaseThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<PhaseThread> phase_threads_;
};

}  // namespace mlcd::coordinator
