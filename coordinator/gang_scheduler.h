// Gangs: which idle workers run which job's phase, the assignments they are handed, and the
// bookkeeping of running and aborted gangs.
//
// Schedule() starts gangs in job submission order (FIFO: a job waiting for idle workers
// holds back the jobs behind it; a job that needs more workers than are registered for its
// kind cannot start and does not hold anyone back). Rank 0's host and the rendezvous port it
// offered in its latest poll form the rendezvous address. A gang is persisted (attempt and
// "gang_started" history) before any worker hears of it. A restart uses the full world_size
// when that many workers are idle; after waiting heartbeat_timeout_seconds with fewer, the
// largest number available that divides batch_size.
//
// The scheduler decides and records; it never changes a job's state. What ends or aborts a
// job (Schedule's unrunnable jobs, SilentMembers' gangs) goes back to the JobManager, which
// owns the state machine.
//
// Locking: no mutex of its own. Every method runs with the JobManager's mutex held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/job_entry.h"
#include "coordinator/job_table.h"
#include "coordinator/metrics.h"
#include "coordinator/worker_registry.h"

namespace mlcd::coordinator {

struct GangSchedulerOptions {
  // Root of the per-job files (extract and eval outputs, default checkpoints).
  std::string data_dir;
  // Handed to every assignment.
  std::string labelstore_address;
  std::chrono::milliseconds heartbeat_interval{1000};
};

// A job and why it cannot go on / why its gang is aborted.
using JobVerdicts = std::vector<std::pair<JobEntry*, std::string>>;

class GangScheduler {
 public:
  // All pointers outlive the scheduler; `work` is notified when assignments appear or are
  // withdrawn (the long polls wait on it).
  GangScheduler(GangSchedulerOptions options, JobTable* jobs, WorkerRegistry* workers,
                CoordinatorMetrics* metrics, std::condition_variable* work)
      : options_(std::move(options)),
        jobs_(jobs),
        workers_(workers),
        metrics_(metrics),
        work_(work) {}

  // After a restart: the job's persisted gang may still run. Its unreported members get a
  // full heartbeat timeout (from `now`) and their workers are marked BUSY with it.
  void Reattach(JobEntry* job, Clock::time_point now);

  // Starts gangs for the jobs that wait for workers. Returns the jobs that can never run
  // (no registered worker can run their phase) with the reason, for the caller to fail.
  JobVerdicts Schedule(Clock::time_point now);
  // Gang members silent for longer than their job's heartbeat timeout: their workers are
  // marked LOST; returns each such job (once) with the reason, for the caller to abort.
  JobVerdicts SilentMembers(Clock::time_point now);

  // The in-memory part of an abort: members told ABORT in their next heartbeat, undelivered
  // assignments withdrawn, the restart counted. Returns the "gang_aborted" history entry for
  // the caller to persist with what follows.
  v1::JobHistoryEntry Detach(JobEntry* job, const std::string& reason, bool counts_as_restart);

  // The job whose running gang has assignment `aid`, or null.
  JobEntry* JobOf(const std::string& aid);
  // A member reported its end: the assignment no longer belongs to a running gang.
  void Forget(JobEntry* job, const std::string& aid);
  // Why a recently aborted assignment was stopped, or null when unknown.
  const std::string* AbortReason(const std::string& aid) const;

 private:
  void Start(JobEntry* job, v1::AssignmentKind kind, const std::vector<WorkerEntry*>& workers);
  v1::GangAttempt NewAttempt(JobEntry* job, v1::AssignmentKind kind,
                             const std::vector<WorkerEntry*>& workers);
  v1::Assignment NewAssignment(const JobEntry& job, const v1::GangAttempt& attempt,
                               const v1::GangMember& member) const;
  // ASSIGN_LABELS: rank a.rank()'s capability to write a.label_set(), minted from the job's
  // delegation and bound to the job, round, phase and rank ("" without a delegation).
  static std::string LabelWriteCapability(const JobEntry& job, const v1::Assignment& a);
  int WantedGangSize(JobEntry* job, int available, Clock::time_point now);

  GangSchedulerOptions options_;
  JobTable* jobs_;
  WorkerRegistry* workers_;
  CoordinatorMetrics* metrics_;
  std::condition_variable* work_;
  // assignment id -> job id, for the gangs running now.
  std::map<std::string, std::string> assignment_jobs_;
  // Why recently aborted assignments were stopped (told to their workers); bounded.
  std::map<std::string, std::string> abort_reasons_;
  std::vector<std::string> abort_order_;
};

// The output paths the gang's members reported, sorted, each once.
std::vector<std::string> GangOutputs(const v1::GangAttempt& attempt);

// Publishes the job, worker and gang-size gauges.
void PublishGauges(const JobTable& jobs, const WorkerRegistry& workers,
                   CoordinatorMetrics* metrics);

}  // namespace mlcd::coordinator
