// JobManager: opening the store and reloading jobs and workers after a restart (the rest of
// the class is in job_manager.cc).
#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "coordinator/job_manager.h"
#include "coordinator/tensorboard_log.h"

namespace mlcd::coordinator {

// ---------------------------------------------------------------------------------------
// Opening and loading.

JobManager::JobManager(JobManagerOptions options, CoordinatorMetrics* metrics,
                       std::unique_ptr<CoordinatorStore> store)
    : options_(std::move(options)),
      metrics_(metrics),
      store_(std::move(store)),
      jobs_(store_.get(), &watch_cv_),
      workers_(store_.get(), {options_.idle_worker_timeout, options_.lost_worker_expiry,
                              options_.worker_name_lease}),
      gangs_({options_.data_dir, options_.labelstore_address, options_.heartbeat_interval}, &jobs_,
             &workers_, metrics_, &work_cv_),
      progress_(&jobs_, metrics_, options_.data_dir),
      phases_({options_.data_dir, options_.clusterd_address, options_.labelstore_address,
               &data_roots_}, &jobs_, &mu_,
              &tick_cv_),
      watch_streams_(options_.max_watch_streams, options_.max_watch_streams_per_identity) {}

StatusOr<std::unique_ptr<JobManager>> JobManager::Open(JobManagerOptions options,
                                                       CoordinatorMetrics* metrics) {
  if (options.data_dir.empty()) return Status::InvalidArgument("--data-dir is required");
  CoordinatorStoreOptions store_options;
  store_options.dir = options.data_dir + "/db";
  store_options.env = options.env;
  store_options.min_free_bytes = options.min_free_bytes;
  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorStore> store,
                        CoordinatorStore::Open(store_options));
  std::vector<std::string> private_dirs = options.private_dirs;
  for (const auto& dir : OwnStateDirs(options.data_dir, {"db", "backups"}))
    private_dirs.push_back(dir);
  MLCD_ASSIGN_OR_RETURN(DataRoots roots,
                        DataRoots::FromFlags(options.data_roots, options.data_dir, private_dirs));
  std::unique_ptr<JobManager> manager(
      new JobManager(std::move(options), metrics, std::move(store)));
  manager->data_roots_ = std::move(roots);
  MLCD_RETURN_IF_ERROR(manager->Load());
  return manager;
}

JobManager::~JobManager() { Shutdown(); }

Status JobManager::Load() {
  MutexLock lock(&mu_);
  MLCD_ASSIGN_OR_RETURN(next_job_seq_, store_->NextJobSeq());
  const auto now = Clock::now();
  const int64_t now_ms = NowUnixMs();
  MLCD_RETURN_IF_ERROR(workers_.Load(now));

  std::vector<v1::JobRecord> jobs;
  MLCD_RETURN_IF_ERROR(store_->LoadJobs(&jobs));
  int recovered = 0;
  jobs_.BeginLoad();
  for (auto& record : jobs) {
    auto entry = std::make_unique<JobEntry>();
    entry->rec = std::move(record);
    // Where this coordinator keeps the job's TensorBoard folder (records older than
    // Job.tensorboard_dir lack it; a moved --data-dir moves it).
    entry->job().set_tensorboard_dir(TensorboardDir(options_.data_dir, entry->job().id()));
    // The job stayed in its state while the coordinator was down: keep counting from when it
    // entered it (phase_seconds, mlcd_coordinator_phase_seconds).
    const int64_t entered_ms = entry->rec.state_entered_unix_ms();
    const int64_t in_state_ms = entered_ms > 0 ? std::max<int64_t>(0, now_ms - entered_ms) : 0;
    entry->state_entered = now - std::chrono::milliseconds(in_state_ms);
    Recover(jobs_.Add(std::move(entry)), now, &recovered);
  }
  MLCD_RETURN_IF_ERROR(jobs_.EndLoad());
  if (!jobs.empty() || workers_.size() > 0) {
    metrics_->Restarted(recovered);
    MLCD_LOG(INFO) << "reloaded " << jobs_.size() << " jobs (" << recovered << " unfinished) and "
                   << workers_.size() << " workers from " << store_->dir();
  }
  UpdateGauges();
  return Status::Ok();
}

void JobManager::Recover(JobEntry* job, Clock::time_point now, int* recovered) {
  if (IsTerminal(job->state())) return;
  const int max_restarts = job->spec().training().max_restarts();
  if (!job->rec.has_attempt() && job->job().restarts() > max_restarts) {
    // A gang's last allowed failure was written but not the FAILED that follows it (a
    // database of an older coordinator, which wrote them separately): finish the decision
    // instead of granting another attempt.
    Transition(job, v1::JOB_STATE_FAILED,
               RestartsExhausted(job->job().restarts(), max_restarts, job->job().message()));
    return;
  }
  ++*recovered;
  std::vector<v1::JobHistoryEntry> history;
  std::string message = "coordinator restarted in state " + StateName(job->state());
  if (job->rec.has_attempt()) {
    // Reattach: the gang may still be running. Its members get a full heartbeat timeout to
    // show up; the scheduler restarts the phase from the last checkpoint if they do not.
    gangs_.Reattach(job, now);
    message += "; reattaching to gang " + job->rec.attempt().id() +
               " (waiting for its workers' heartbeats)";
  }
  history.push_back(jobs_.NewHistory(job, "recovered", message));
  job->job().set_message(message);
  jobs_.Persist(job, std::move(history));
}

}  // namespace mlcd::coordinator
