#include "coordinator/job_manager.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <functional>

#include "clients/clusterd_client.h"
#include "common/clock.h"
#include "common/format.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "coordinator/input_checks.h"

namespace mlcd::coordinator {

// ---------------------------------------------------------------------------------------
// Opening and loading.

JobManager::JobManager(JobManagerOptions options, CoordinatorMetrics* metrics,
                       std::unique_ptr<CoordinatorStore> store)
    : options_(std::move(options)),
      metrics_(metrics),
      store_(std::move(store)),
      jobs_(store_.get(), &watch_cv_),
      workers_(store_.get(), {options_.idle_worker_timeout, options_.lost_worker_expiry}),
      gangs_({options_.data_dir, options_.labelstore_address, options_.heartbeat_interval}, &jobs_,
             &workers_, metrics_, &work_cv_),
      progress_(&jobs_, metrics_),
      phases_({options_.data_dir, options_.clusterd_address, options_.labelstore_address}, &jobs_,
              &mu_, &tick_cv_) {}

StatusOr<std::unique_ptr<JobManager>> JobManager::Open(JobManagerOptions options,
                                                       CoordinatorMetrics* metrics) {
  if (options.data_dir.empty()) return Status::InvalidArgument("--data-dir is required");
  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorStore> store,
                        CoordinatorStore::Open(options.data_dir + "/db"));
  std::unique_ptr<JobManager> manager(
      new JobManager(std::move(options), metrics, std::move(store)));
  MLCD_RETURN_IF_ERROR(manager->Load());
  return manager;
}

JobManager::~JobManager() { Shutdown(); }

Status JobManager::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  MLCD_ASSIGN_OR_RETURN(next_job_seq_, store_->NextJobSeq());
  const auto now = Clock::now();
  const int64_t now_ms = NowUnixMs();
  MLCD_RETURN_IF_ERROR(workers_.Load(now));

  std::vector<v1::JobRecord> jobs;
  MLCD_RETURN_IF_ERROR(store_->LoadJobs(&jobs));
  int recovered = 0;
  for (auto& record : jobs) {
    auto entry = std::make_unique<JobEntry>();
    entry->rec = std::move(record);
    // The job stayed in its state while the coordinator was down: keep counting from when it
    // entered it (phase_seconds, mlcd_coordinator_phase_seconds).
    const int64_t entered_ms = entry->rec.state_entered_unix_ms();
    const int64_t in_state_ms = entered_ms > 0 ? std::max<int64_t>(0, now_ms - entered_ms) : 0;
    entry->state_entered = now - std::chrono::milliseconds(in_state_ms);
    Recover(jobs_.Add(std::move(entry)), now, &recovered);
  }
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

void JobManager::Start() {
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

void JobManager::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_ && !scheduler_.joinable() && phases_.idle()) return;
    shutting_down_ = true;
    phases_.BeginShutdown();
    for (auto& [id, job] : jobs_.all()) {
      if (job->control) job->control->Cancel();
    }
  }
  work_cv_.notify_all();
  watch_cv_.notify_all();
  tick_cv_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  phases_.JoinAll();
}

void JobManager::UpdateGauges() { PublishGauges(jobs_, workers_, metrics_); }

// ---------------------------------------------------------------------------------------
// State machine.

void JobManager::Transition(JobEntry* job, v1::JobState state, const std::string& message,
                            std::vector<v1::JobHistoryEntry> before) {
  const auto now = Clock::now();
  const v1::JobState old = job->state();
  const double seconds = std::chrono::duration<double>(now - job->state_entered).count();
  const std::string old_name = StateName(old);
  auto& phases = *job->job().mutable_phase_seconds();
  phases[old_name] += seconds;
  metrics_->PhaseSeconds(old_name, seconds);

  job->job().set_state(state);
  job->job().set_message(message);
  if (IsTerminal(state)) job->job().set_finished_unix_ms(NowUnixMs());
  job->job().mutable_progress()->set_detail("");
  job->rec.set_state_entered_unix_ms(NowUnixMs());
  job->state_entered = now;
  ++job->phase_generation;
  job->phase_running = false;
  if (job->control) {
    job->control->Cancel();
    job->control.reset();
  }
  job->transient_failures = 0;
  job->retry_after = {};
  job->short_since.reset();

  before.push_back(jobs_.NewHistory(job, "state", message));
  jobs_.Persist(job, std::move(before));
  MLCD_LOG(INFO) << "job " << job->job().id() << ": " << old_name << " -> " << StateName(state)
                 << (message.empty() ? "" : ": " + message);
  UpdateGauges();
  jobs_.Touch(job);
  tick_cv_.notify_all();
}

void JobManager::EndJob(JobEntry* job, v1::JobState state, const std::string& message) {
  if (IsTerminal(job->state())) return;
  std::vector<v1::JobHistoryEntry> before;
  if (job->rec.has_attempt())
    before.push_back(gangs_.Detach(job, message, /*counts_as_restart=*/false));
  Transition(job, state, message, std::move(before));
}

void JobManager::FailJob(JobEntry* job, const std::string& message) {
  EndJob(job, v1::JOB_STATE_FAILED, message);
}

void JobManager::AbortGang(JobEntry* job, const std::string& reason, bool counts_as_restart) {
  if (!job->rec.has_attempt()) return;
  auto entry = gangs_.Detach(job, reason, counts_as_restart);
  const int max_restarts = job->spec().training().max_restarts();
  if (counts_as_restart && job->job().restarts() > max_restarts) {
    // One write for the abort and the FAILED: a crash between them must not give the job
    // one more attempt than max_restarts.
    Transition(job, v1::JOB_STATE_FAILED,
               RestartsExhausted(job->job().restarts(), max_restarts, reason), {std::move(entry)});
    return;
  }
  if (counts_as_restart) {
    job->job().mutable_progress()->set_detail("restarting from the last checkpoint after: " +
                                              reason);
  }
  jobs_.Persist(job, {std::move(entry)});
  UpdateGauges();
  jobs_.Touch(job);
}

void JobManager::FinishGang(JobEntry* job) {
  const v1::GangAttempt attempt = job->rec.attempt();
  v1::RoundStatus* round = job->job().mutable_rounds(attempt.round());
  if (attempt.kind() == v1::ASSIGNMENT_KIND_TRAIN) {
    const int end_epoch = RoundEndEpoch(*round, attempt.end_epoch());
    if (round->epochs_committed() < end_epoch) {
      AbortGang(job,
                "the gang finished but rank 0 never reported the checkpoint of epoch " +
                    std::to_string(end_epoch - 1) +
                    " (epochs committed: " + std::to_string(round->epochs_committed()) + ")",
                true);
      return;
    }
    job->rec.clear_attempt();
    job->rec.set_phase_failures(0);
    job->job().mutable_progress()->set_gang_size(0);
    round->set_trained(true);
    auto entry = jobs_.NewHistory(job, "round_trained",
                                  RoundText(attempt.round(), job->spec().training().rounds()) +
                                      " trained to global step " +
                                      std::to_string(round->checkpoint_global_step()));
    entry.set_attempt_id(attempt.id());
    entry.set_global_step(round->checkpoint_global_step());
    entry.set_checkpoint(round->checkpoint());
    jobs_.Persist(job, {entry});
    AfterRoundTrained(job);
    return;
  }
  if (attempt.kind() == v1::ASSIGNMENT_KIND_EXTRACT) {
    const std::vector<std::string> outputs = GangOutputs(attempt);
    if (outputs.empty()) {
      AbortGang(job, "feature extraction finished without reporting any feature shard", true);
      return;
    }
    job->rec.clear_attempt();
    job->rec.set_phase_failures(0);
    round->clear_feature_paths();
    for (const auto& p : outputs) round->add_feature_paths(p);
    round->set_feature_source(attempt.resume_checkpoint().empty()
                                  ? "model (randomly initialised)"
                                  : "model (checkpoint " + attempt.resume_checkpoint() + ")");
    Transition(job, v1::JOB_STATE_CLUSTERING,
               "extracted features into " + std::to_string(outputs.size()) + " shards");
    return;
  }
  // EVALUATE: rank 0's result is the job's.
  for (const auto& m : attempt.members()) {
    if (m.rank() == 0) *job->job().mutable_evaluation() = m.evaluation();
  }
  job->rec.clear_attempt();
  const auto& e = job->job().evaluation();
  Transition(job, v1::JOB_STATE_SUCCEEDED,
             "linear probe accuracy " + Fixed(100 * e.linear_probe_accuracy()) +
                 "%, kNN accuracy " + Fixed(100 * e.knn_accuracy()) + "%");
}

void JobManager::AfterRoundTrained(JobEntry* job) {
  const int r = job->job().rounds_size() - 1;
  const auto& spec = job->spec();
  const int64_t steps = job->round()->checkpoint_global_step();
  if (r + 1 < spec.training().rounds()) {
    auto* next = job->job().add_rounds();
    next->set_round(r + 1);
    job->job().mutable_progress()->set_round(r + 1);
    job->job().mutable_progress()->set_epoch(0);
    Transition(job, v1::JOB_STATE_EXTRACTING,
               RoundText(r, spec.training().rounds()) +
                   " trained; extracting the model's features for " +
                   RoundText(r + 1, spec.training().rounds()));
  } else if (spec.evaluation().enabled()) {
    Transition(job, v1::JOB_STATE_EVALUATING,
               "training finished at global step " + std::to_string(steps) + "; evaluating");
  } else {
    Transition(job, v1::JOB_STATE_SUCCEEDED,
               "trained " + std::to_string(steps) + " optimizer steps; checkpoint " +
                   job->job().checkpoint());
  }
}

// ---------------------------------------------------------------------------------------
// User API.

StatusOr<v1::Job> JobManager::SubmitJob(const v1::SubmitJobRequest& request) {
  MLCD_ASSIGN_OR_RETURN(const ParsedJob parsed, ParseSubmission(request, options_.data_dir));

  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) return Status::Unavailable("the coordinator is shutting down; retry");
  // A dry run answers as a dry run even for a used request id, saying what submitting would
  // do (return that job, or ALREADY_EXISTS for another spec).
  std::string existing_job;
  if (!request.request_id().empty()) {
    auto existing = store_->FindRequest(request.request_id());
    if (existing.ok()) {
      JobEntry* job = jobs_.Find(*existing);
      if (!job)
        return Status::Internal("request id '" + request.request_id() + "' maps to a missing job");
      if (!google::protobuf::util::MessageDifferencer::Equals(job->spec(), parsed.spec) ||
          !google::protobuf::util::MessageDifferencer::Equals(job->job().metadata(),
                                                              parsed.metadata)) {
        return Status::AlreadyExists("request id '" + request.request_id() +
                                     "' was already used for job " + job->job().id() +
                                     " with a different spec; use a new request id");
      }
      if (!request.dry_run()) return jobs_.PublicJob(*job);
      existing_job = job->job().id();
    } else if (existing.status().code() != StatusCode::kNotFound) {
      return existing.status();
    }
  }
  if (existing_job.empty())
    MLCD_RETURN_IF_ERROR(CheckWorkerSupport(parsed.spec, workers_, Clock::now()));

  const int64_t seq = next_job_seq_;
  std::unique_ptr<JobEntry> entry = NewJobEntry(request, parsed, seq);
  JobEntry* job = entry.get();
  v1::Job& j = job->job();
  if (request.dry_run()) {
    j.set_message("dry run: the spec is valid; nothing was created" +
                  (existing_job.empty()
                       ? std::string()
                       : " (request id '" + request.request_id() + "' already names job " +
                             existing_job + ": submitting returns that job)"));
    return j;
  }

  StoreBatch batch;
  auto history = jobs_.NewHistory(
      job, "submitted",
      "submitted" + (request.request_id().empty() ? std::string()
                                                  : " with request id " + request.request_id()));
  batch.AppendHistory(j.id(), history);
  batch.PutJob(job->rec);
  if (!request.request_id().empty()) batch.PutRequest(request.request_id(), j.id());
  batch.PutNextJobSeq(seq + 1);
  MLCD_RETURN_IF_ERROR(store_->Commit(&batch));
  next_job_seq_ = seq + 1;
  v1::Job out = jobs_.PublicJob(*job);
  MLCD_LOG(INFO) << "job " << j.id() << " submitted (world size "
                 << parsed.spec.training().world_size() << ", k " << parsed.spec.clustering().k()
                 << ", l " << parsed.spec.clustering().l() << ")";
  jobs_.Add(std::move(entry));
  UpdateGauges();
  tick_cv_.notify_all();
  return out;
}

StatusOr<v1::Job> JobManager::GetJob(const v1::GetJobRequest& request) {
  if (request.id().empty())
    return Status::InvalidArgument("id: empty; give a job id (see `mlcdctl list`)");
  v1::Job out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    JobEntry* job = jobs_.Find(request.id());
    if (!job) return Status::NotFound("job '" + request.id() + "' does not exist");
    out = jobs_.PublicJob(*job);
  }
  if (request.include_history()) {
    std::vector<v1::JobHistoryEntry> history;
    MLCD_RETURN_IF_ERROR(store_->ReadHistory(request.id(), &history));
    for (auto& h : history) *out.add_history() = std::move(h);
  }
  return out;
}

StatusOr<v1::ListJobsResponse> JobManager::ListJobs(const v1::ListJobsRequest& request) {
  MLCD_ASSIGN_OR_RETURN(const ListJobsQuery query, ParseListJobs(request));
  const int page_size = query.page_size;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobEntry*> matching;
  for (auto& [id, job] : jobs_.all()) {
    if (job->rec.seq() >= query.before_seq) continue;
    if (!query.states.empty() && !query.states.count(job->state())) continue;
    matching.push_back(job.get());
  }
  // Newest first.
  std::sort(matching.begin(), matching.end(),
            [](JobEntry* a, JobEntry* b) { return a->rec.seq() > b->rec.seq(); });
  v1::ListJobsResponse response;
  for (size_t i = 0; i < matching.size() && static_cast<int>(i) < page_size; ++i) {
    *response.add_jobs() = jobs_.PublicJob(*matching[i]);
  }
  if (static_cast<int>(matching.size()) > page_size) {
    response.set_next_page_token(std::to_string(matching[page_size - 1]->rec.seq()));
  }
  return response;
}

StatusOr<v1::Job> JobManager::CancelJob(const v1::CancelJobRequest& request) {
  if (request.id().empty())
    return Status::InvalidArgument("id: empty; give a job id (see `mlcdctl list`)");
  std::lock_guard<std::mutex> lock(mu_);
  JobEntry* job = jobs_.Find(request.id());
  if (!job) return Status::NotFound("job '" + request.id() + "' does not exist");
  if (job->state() == v1::JOB_STATE_CANCELLED) return jobs_.PublicJob(*job);
  if (IsTerminal(job->state())) {
    return Status::FailedPrecondition("job " + request.id() + " already ended " +
                                      StateName(job->state()) +
                                      "; only unfinished jobs can be cancelled");
  }
  const std::string reason =
      "cancelled" + (request.reason().empty() ? std::string() : ": " + request.reason());
  EndJob(job, v1::JOB_STATE_CANCELLED, reason);
  return jobs_.PublicJob(*job);
}

Status JobManager::WatchJob(const v1::WatchJobRequest& request,
                            const std::function<bool(const v1::JobEvent&)>& send,
                            const std::function<bool()>& is_cancelled) {
  if (request.id().empty())
    return Status::InvalidArgument("id: empty; give a job id (see `mlcdctl list`)");
  std::unique_lock<std::mutex> lock(mu_);
  JobEntry* job = jobs_.Find(request.id());
  if (!job) return Status::NotFound("job '" + request.id() + "' does not exist");
  uint64_t sent_version = 0;
  while (true) {
    if (job->version != sent_version) {
      v1::JobEvent event;
      *event.mutable_job() = jobs_.PublicJob(*job);
      event.set_unix_ms(NowUnixMs());
      sent_version = job->version;
      const bool terminal = IsTerminal(event.job().state());
      lock.unlock();
      if (!send(event)) return Status::Ok();
      if (terminal) return Status::Ok();
      lock.lock();
    }
    if (shutting_down_)
      return Status::Unavailable("the coordinator is shutting down; watch again once it is back");
    if (is_cancelled()) return Status::Cancelled("watch cancelled by the client");
    watch_cv_.wait_for(lock, std::chrono::milliseconds(500));
  }
}

// ---------------------------------------------------------------------------------------
// Worker API.

StatusOr<v1::RegisterWorkerResponse> JobManager::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  MLCD_RETURN_IF_ERROR(CheckRegistration(request));
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  if (WorkerEntry* old = workers_.Find(request.name())) {
    // A new process under the same name: whatever the old one ran is gone.
    JobEntry* job = old->assignment_id.empty() ? nullptr : gangs_.JobOf(old->assignment_id);
    if (job) {
      // An assignment its old process never received was not a failure of the gang: abort
      // it (the new process may have another address) without counting a restart.
      AbortGang(job,
                "worker " + request.name() + " registered again (its previous process is gone)",
                /*counts_as_restart=*/old->delivered);
    }
  }
  MLCD_RETURN_IF_ERROR(workers_.Register(request, now).status());
  MLCD_LOG(INFO) << "worker " << request.name() << " registered (" << request.host() << ", "
                 << request.capacity().cpu_threads() << " threads)";
  UpdateGauges();
  tick_cv_.notify_all();
  v1::RegisterWorkerResponse response;
  response.set_worker_id(request.name());
  response.set_heartbeat_interval_ms(static_cast<int32_t>(options_.heartbeat_interval.count()));
  response.set_heartbeat_interval_seconds(
      std::max<int32_t>(1, static_cast<int32_t>(options_.heartbeat_interval.count() / 1000)));
  return response;
}

StatusOr<v1::Assignment> JobManager::GetAssignment(const v1::GetAssignmentRequest& request,
                                                   const std::function<bool()>& is_cancelled) {
  MLCD_RETURN_IF_ERROR(CheckPoll(request, options_.max_poll_seconds));
  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_)
    return Status::Unavailable("the coordinator is shutting down; poll again once it is back");
  WorkerEntry* worker = workers_.Find(request.worker_id());
  if (!worker) {
    return Status::NotFound("unknown worker '" + request.worker_id() +
                            "'; register first (RegisterWorker)");
  }
  const auto now = Clock::now();
  workers_.Seen(worker, now);
  if (request.rendezvous_port() > 0) worker->offered_port = request.rendezvous_port();
  if (worker->state == v1::WORKER_STATE_LOST) worker->state = v1::WORKER_STATE_IDLE;
  if (worker->state == v1::WORKER_STATE_DRAINING)
    workers_.Release(worker);  // polling: its child is gone
  if (worker->state == v1::WORKER_STATE_BUSY && worker->delivered) {
    if (JobEntry* job = gangs_.JobOf(worker->assignment_id)) {
      AbortGang(job,
                "worker " + worker->record.worker_id() + " asked for new work while assigned " +
                    worker->assignment_id + " (its agent restarted or dropped the assignment)",
                true);
    }
    workers_.Release(worker);
  }
  UpdateGauges();
  return WaitForAssignment(worker, now + std::chrono::seconds(request.wait_seconds()), is_cancelled,
                           &lock);
}

StatusOr<v1::Assignment> JobManager::WaitForAssignment(WorkerEntry* worker,
                                                       Clock::time_point deadline,
                                                       const std::function<bool()>& is_cancelled,
                                                       std::unique_lock<std::mutex>* lock) {
  ++worker->polls_waiting;
  tick_cv_.notify_all();
  while (!shutting_down_ && !worker->pending && !is_cancelled()) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    work_cv_.wait_until(*lock, std::min(deadline, now + std::chrono::milliseconds(500)));
    workers_.Seen(worker, Clock::now());
  }
  --worker->polls_waiting;
  v1::Assignment assignment;
  if (worker->pending && is_cancelled()) {
    // The client gave up (deadline passed, it went away): the answer would be lost, so the
    // assignment stays pending for the worker's next poll.
    MLCD_LOG(INFO) << "poll of worker " << worker->record.worker_id() << " was cancelled; "
                   << worker->assignment_id << " stays pending for its next poll";
    return Status::Cancelled(
        "the poll was cancelled by the client before an assignment could be handed out");
  }
  if (worker->pending) {
    assignment = std::move(*worker->pending);
    worker->pending.reset();
    worker->delivered = true;
    if (JobEntry* job = jobs_.Find(worker->job_id))
      job->member_last_heard[worker->assignment_id] = Clock::now();
    MLCD_LOG(INFO) << "worker " << worker->record.worker_id() << " took " << assignment.id()
                   << " (rank " << assignment.rank() << "/" << assignment.world_size()
                   << ", rendezvous " << assignment.rendezvous_address() << ")";
  } else {
    assignment.set_kind(v1::ASSIGNMENT_KIND_NONE);
  }
  return assignment;
}

StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(const v1::HeartbeatRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  metrics_->Heartbeat();
  v1::HeartbeatResponse response;
  WorkerEntry* worker = workers_.Find(request.worker_id());
  if (!worker) {
    response.set_action(v1::WORKER_ACTION_REREGISTER);
    response.set_reason("unknown worker '" + request.worker_id() + "'; register again");
    return response;
  }
  const auto now = Clock::now();
  workers_.Seen(worker, now);
  if (worker->state == v1::WORKER_STATE_LOST) {
    workers_.Release(worker);
    UpdateGauges();
  }
  const std::string& aid = request.assignment_id();
  if (aid.empty()) return response;
  JobEntry* job = gangs_.JobOf(aid);
  const v1::GangMember* member = nullptr;
  if (job && job->rec.has_attempt()) {
    for (const auto& m : job->rec.attempt().members()) {
      if (m.assignment_id() == aid) member = &m;
    }
  }
  if (!job || !member || member->worker_id() != worker->record.worker_id()) {
    worker->state = v1::WORKER_STATE_DRAINING;
    worker->assignment_id = aid;
    UpdateGauges();
    response.set_action(v1::WORKER_ACTION_ABORT);
    const std::string* why = gangs_.AbortReason(aid);
    response.set_reason("assignment " + aid + " is no longer active: " +
                        (why ? *why : "its gang was aborted or its job ended"));
    return response;
  }
  job->member_last_heard[aid] = now;
  worker->delivered = true;
  worker->progress = request.progress();
  if (member->rank() == 0) progress_.OnRankZeroProgress(job, request.progress(), now);
  return response;
}

StatusOr<v1::ReportAssignmentResponse> JobManager::ReportAssignment(
    const v1::ReportAssignmentRequest& request) {
  if (request.assignment_id().empty()) return Status::InvalidArgument("assignment_id: empty");
  std::lock_guard<std::mutex> lock(mu_);
  v1::ReportAssignmentResponse response;
  WorkerEntry* worker = workers_.Find(request.worker_id());
  const std::string& aid = request.assignment_id();
  if (worker) {
    workers_.Seen(worker, Clock::now());
    if (worker->assignment_id == aid || worker->state == v1::WORKER_STATE_LOST)
      workers_.Release(worker);
  }
  JobEntry* job = gangs_.JobOf(aid);
  if (!job || !job->rec.has_attempt()) {
    MLCD_LOG(INFO) << "report of inactive assignment " << aid << " from " << request.worker_id()
                   << " (" << (request.succeeded() ? "succeeded" : "failed: " + request.message())
                   << ")";
    UpdateGauges();
    tick_cv_.notify_all();
    return response;
  }
  v1::GangMember* member = nullptr;
  for (auto& m : *job->rec.mutable_attempt()->mutable_members()) {
    if (m.assignment_id() == aid) member = &m;
  }
  if (!member || member->reported()) return response;
  gangs_.Forget(job, aid);
  member->set_reported(true);
  member->set_succeeded(request.succeeded());
  for (const auto& path : request.output_paths()) member->add_output_paths(path);
  if (request.has_evaluation()) *member->mutable_evaluation() = request.evaluation();
  const int rank = member->rank();
  const std::string worker_id = member->worker_id();
  if (rank == 0) progress_.OnRankZeroProgress(job, request.progress(), Clock::now());
  MLCD_LOG(INFO) << "worker " << worker_id << " (rank " << rank << ") reported " << aid << ": "
                 << (request.succeeded() ? "succeeded" : "failed: " + request.message());
  if (!request.succeeded()) {
    AbortGang(
        job,
        "worker " + worker_id + " (rank " + std::to_string(rank) + ") failed: " + request.message(),
        true);
  } else {
    bool all = true;
    for (const auto& m : job->rec.attempt().members()) all = all && m.reported() && m.succeeded();
    if (all) {
      FinishGang(job);
    } else {
      jobs_.Persist(job, {jobs_.NewHistory(job, "member_finished",
                                           "rank " + std::to_string(rank) + " finished")});
    }
  }
  UpdateGauges();
  tick_cv_.notify_all();
  return response;
}

StatusOr<v1::ListWorkersResponse> JobManager::ListWorkers(const v1::ListWorkersRequest&) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::ListWorkersResponse response;
  workers_.List(&response);
  return response;
}

// ---------------------------------------------------------------------------------------
// Scheduler.

void JobManager::SchedulerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    Tick();
    tick_cv_.wait_for(lock, options_.tick);
  }
}

void JobManager::Tick() {
  const auto now = Clock::now();
  ApplyPhaseOutcomes();
  if (workers_.CheckLiveness(now)) UpdateGauges();
  for (const auto& [job, reason] : gangs_.SilentMembers(now)) AbortGang(job, reason, true);
  AdvanceJobs(now);
  for (const auto& [job, reason] : gangs_.Schedule(now)) FailJob(job, reason);
}

void JobManager::ApplyPhaseOutcomes() {
  for (const PhaseOutcome& outcome : phases_.CollectFinished()) {
    JobEntry* job = phases_.StillCurrent(outcome.job_id, outcome.generation);
    if (!job) continue;
    if (!outcome.status.ok()) {
      if (!phases_.HandleError(job, outcome.what, outcome.status))
        FailJob(job, outcome.what + " failed: " + outcome.status.ToString());
      continue;
    }
    const PhaseNext next = phases_.Apply(job, outcome);
    Transition(job, next.state, next.message);
  }
}

void JobManager::AdvanceJobs(Clock::time_point now) {
  for (auto& [id, entry] : jobs_.all()) {
    JobEntry* job = entry.get();
    switch (job->state()) {
      case v1::JOB_STATE_PENDING: {
        auto* round = job->job().add_rounds();
        round->set_round(0);
        job->job().mutable_progress()->set_round(0);
        if (job->spec().clustering().features().kind() == "model") {
          Transition(job, v1::JOB_STATE_EXTRACTING,
                     RoundText(0, job->spec().training().rounds()) +
                         ": extracting features of the initial model");
        } else {
          Transition(job, v1::JOB_STATE_CLUSTERING,
                     RoundText(0, job->spec().training().rounds()) + ": clustering " +
                         job->spec().clustering().features().kind() + " features");
        }
        break;
      }
      case v1::JOB_STATE_CLUSTERING:
      case v1::JOB_STATE_ASSIGNING:
        if (!job->phase_running && now >= job->retry_after) phases_.Launch(job);
        break;
      case v1::JOB_STATE_TRAINING:
        // Crash between "round trained" and the next transition (not expected: one write).
        if (!job->rec.has_attempt() && job->round() && job->round()->trained())
          AfterRoundTrained(job);
        break;
      default:
        break;
    }
  }
}

}  // namespace mlcd::coordinator
