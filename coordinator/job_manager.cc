#include "coordinator/job_manager.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "clients/clusterd_client.h"
#include "common/acting_for.h"
#include "common/clock.h"
#include "common/format.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/spec_defaults.h"
#include "common/spec_validation.h"
#include "coordinator/caller_checks.h"
#include "coordinator/checkpoint_dirs.h"
#include "coordinator/given_label_set.h"
#include "coordinator/input_checks.h"
#include "coordinator/tensorboard_log.h"

namespace mlcd::coordinator {

// ---------------------------------------------------------------------------------------
// Opening the store and reloading jobs and workers after a restart.

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
      phases_(
          {options_.data_dir, options_.clusterd_address, options_.labelstore_address, &data_roots_},
          &jobs_, &mu_, &tick_cv_),
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

// ---------------------------------------------------------------------------------------
// Running.

void JobManager::Start() {
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

void JobManager::Shutdown() {
  {
    MutexLock lock(&mu_);
    AssertPhasesHeld();
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
  job->rec.set_phase_attempts(0);
  job->retry_after = {};
  job->short_since.reset();

  before.push_back(jobs_.NewHistory(job, "state", message));
  jobs_.Persist(job, std::move(before));
  AssertPhasesHeld();
  // A job that ends during the gang's ASSIGNING leaves the round's set partial: never sealed.
  if (old == v1::JOB_STATE_ASSIGNING && IsTerminal(state) && state != v1::JOB_STATE_SUCCEEDED &&
      GangClusters(job->spec()))
    phases_.DeletePartialSet(job->job().id(),
                             RoundLabelSet(job->job(), job->job().rounds_size() - 1));
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
  // The set a labelling gang was writing is partial: the next attempt starts from a new one.
  if (job->rec.attempt().kind() == v1::ASSIGNMENT_KIND_ASSIGN_LABELS)
    job->job().mutable_rounds(job->rec.attempt().round())->clear_label_set();
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
  if (attempt.kind() == v1::ASSIGNMENT_KIND_CLUSTER ||
      attempt.kind() == v1::ASSIGNMENT_KIND_ASSIGN_LABELS) {
    FinishClusteringGang(job, attempt);
    return;
  }
  // EVALUATE: rank 0's result is the job's.
  for (const auto& m : attempt.members()) {
    if (m.rank() == 0) *job->job().mutable_evaluation() = m.evaluation();
  }
  job->rec.clear_attempt();
  const auto& e = job->job().evaluation();
  Status curves = WriteEvaluationScalars(job->job().tensorboard_dir(),
                                         job->round()->checkpoint_global_step(), e);
  if (!curves.ok())
    MLCD_LOG(WARNING) << "TensorBoard scalars of the evaluation: " << curves.ToString();
  // The single-label figures when the dataset has classes (a probe picks λ > 0), and the
  // multi-label mAP when it has label sets.
  std::string summary;
  if (e.linear_probe_lambda() > 0 || e.knn_accuracy() > 0)
    summary = "linear probe accuracy " + Fixed(100 * e.linear_probe_accuracy()) +
              "%, kNN accuracy " + Fixed(100 * e.knn_accuracy()) + "%";
  if (e.has_multi_label())
    summary += (summary.empty() ? "" : ", ") + std::string("multi-label mAP ") +
               Fixed(100 * e.multi_label().mean_average_precision()) + "%";
  Transition(job, v1::JOB_STATE_SUCCEEDED, summary.empty() ? "evaluated" : summary);
}

void JobManager::AfterRoundTrained(JobEntry* job) {
  const int r = job->job().rounds_size() - 1;
  const auto& spec = job->spec();
  const int64_t steps = job->round()->checkpoint_global_step();
  if (IsMcl(spec)) {
    // Every stage is clustered after it trained: the next stage trains on it, and the last
    // one's clustering completes the record (cluster sizes, agreement between stages).
    Transition(job, v1::JOB_STATE_EXTRACTING,
               StageText(r, spec.mcl().stages()) + " trained to global step " +
                   std::to_string(steps) + "; extracting its embeddings to cluster them");
  } else if (r + 1 < spec.training().rounds()) {
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

StatusOr<v1::Job> JobManager::SubmitJob(const v1::SubmitJobRequest& request,
                                        const std::string& caller, bool admin) {
  MLCD_ASSIGN_OR_RETURN(ParsedJob parsed,
                        ParseSubmission(request, options_.data_dir, &data_roots_));
  // A given label set, read outside the mutex; its k and l fill the spec's before the spec is
  // compared with a retried request's.
  std::optional<v1::LabelSetInfo> given;
  if (const std::string& name = parsed.spec.clustering().label_set(); !name.empty()) {
    MLCD_ASSIGN_OR_RETURN(given, DescribeGivenLabelSet(options_.labelstore_address, name));
    MLCD_ASSIGN_OR_RETURN(const uint64_t samples, TrainingSampleCount(parsed.spec));
    MLCD_RETURN_IF_ERROR(ApplyGivenLabelSet(*given, samples, &parsed.spec));
  }
  // MCL's Eq. 4 on an indexed dataset, whose size validation could not know.
  if (parsed.spec.has_mcl() && DatasetTrainingImages(parsed.spec.dataset()) == 0) {
    MLCD_ASSIGN_OR_RETURN(const uint64_t samples, TrainingSampleCount(parsed.spec));
    MLCD_RETURN_IF_ERROR(
        SpecProblemsToStatus(MclClusterBudgetProblems(parsed.spec, samples, "spec")));
  }
  // Read outside the mutex; decided below, where the job table is known.
  MLCD_ASSIGN_OR_RETURN(const std::string checkpoint_owner,
                        CheckpointDirOwner(parsed.spec, caller, options_.data_dir, data_roots_));

  MutexLock lock(&mu_);
  if (shutting_down_) return Status::Unavailable("the coordinator is shutting down; retry");
  if (!request.dry_run() && jobs_.CountActive() >= kMaxActiveJobs) {
    return Status::ResourceExhausted("the coordinator holds " + std::to_string(kMaxActiveJobs) +
                                     " jobs that have not ended; cancel some or wait");
  }
  // A dry run answers as a dry run even for a used request id, saying what submitting would
  // do (return that job, or ALREADY_EXISTS for another spec). Request ids are the caller's
  // own: another identity's use of the same id is not seen here (docs/security.md).
  std::string existing_job;
  if (!request.request_id().empty()) {
    auto existing = store_->FindRequest(caller, request.request_id());
    if (existing.ok()) {
      JobEntry* job = jobs_.Find(*existing);
      if (!job)
        return Status::Internal("request id '" + request.request_id() + "' maps to a missing job");
      // Compared with the defaults applied to the stored spec too, so that a job stored with a
      // field unset that has a default now (clustering.seed 0) matches its spec sent again.
      v1::JobSpec stored = job->spec();
      ApplyJobSpecDefaults(&stored);
      if (!google::protobuf::util::MessageDifferencer::Equals(stored, parsed.spec) ||
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
  if (existing_job.empty()) {
    if (given) {
      const std::string& owner = given->owner();
      const JobEntry* owning = owner.rfind(kJobIdentityPrefix, 0) == 0
                                   ? jobs_.Find(owner.substr(kJobIdentityPrefix.size()))
                                   : nullptr;
      MLCD_RETURN_IF_ERROR(CheckGivenLabelSetOwner(
          given->name(), owner, caller, admin, owning ? &owning->job().submitted_by() : nullptr));
    }
    MLCD_RETURN_IF_ERROR(
        CheckCheckpointDirUnshared(parsed.spec, checkpoint_owner, options_.data_dir, jobs_));
    MLCD_RETURN_IF_ERROR(CheckWorkerSupport(parsed.spec, workers_, Clock::now()));
  }
  // New work is refused below the disk's reserve (the jobs already running write into it).
  if (!request.dry_run()) MLCD_RETURN_IF_ERROR(store_->CheckSpace("submitting a job"));

  const int64_t seq = next_job_seq_;
  std::unique_ptr<JobEntry> entry = NewJobEntry(request, parsed, seq);
  JobEntry* job = entry.get();
  v1::Job& j = job->job();
  j.set_submitted_by(caller);
  if (request.dry_run()) {
    j.set_message("dry run: the spec is valid; nothing was created" +
                  (existing_job.empty()
                       ? std::string()
                       : " (request id '" + request.request_id() + "' already names job " +
                             existing_job + ": submitting returns that job)"));
    return j;
  }
  j.set_tensorboard_dir(TensorboardDir(options_.data_dir, j.id()));

  StoreBatch batch;
  auto history = jobs_.NewHistory(
      job, "submitted",
      "submitted" + (request.request_id().empty() ? std::string()
                                                  : " with request id " + request.request_id()));
  batch.AppendHistory(j.id(), history);
  batch.PutJob(job->rec);
  if (!request.request_id().empty()) batch.PutRequest(caller, request.request_id(), j.id());
  batch.PutNextJobSeq(seq + 1);
  MLCD_RETURN_IF_ERROR(store_->Commit(&batch));
  next_job_seq_ = seq + 1;
  v1::Job out = jobs_.PublicJob(*job);
  MLCD_LOG(INFO) << "job " << j.id() << " submitted (world size "
                 << parsed.spec.training().world_size() << ", k " << parsed.spec.clustering().k()
                 << ", l " << parsed.spec.clustering().l()
                 << (given ? ", label set " + given->name() : std::string()) << ")";
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
    MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
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

StatusOr<v1::Job> JobManager::CancelJob(const v1::CancelJobRequest& request,
                                        const std::string& caller, bool any_job) {
  MLCD_RETURN_IF_ERROR(CheckCancel(request));
  MutexLock lock(&mu_);
  JobEntry* job = jobs_.Find(request.id());
  if (!job) return Status::NotFound("job '" + request.id() + "' does not exist");
  MLCD_RETURN_IF_ERROR(CheckCancelAllowed(job->rec.job(), caller, any_job));
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

Status JobManager::WatchJob(const v1::WatchJobRequest& request, const std::string& caller,
                            const std::function<bool(const v1::JobEvent&)>& send,
                            const std::function<bool()>& is_cancelled) {
  if (request.id().empty())
    return Status::InvalidArgument("id: empty; give a job id (see `mlcdctl list`)");
  // Each stream holds a server thread: bounded per identity and in all.
  MLCD_ASSIGN_OR_RETURN(WatchStreamLimits::Slot slot, watch_streams_.Open(caller));
  MutexLock lock(&mu_);
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
      lock.Unlock();
      if (!send(event)) return Status::Ok();
      if (terminal) return Status::Ok();
      lock.Lock();
    }
    if (shutting_down_)
      return Status::Unavailable("the coordinator is shutting down; watch again once it is back");
    if (is_cancelled()) return Status::Cancelled("watch cancelled by the client");
    watch_cv_.wait_for(lock.native(), std::chrono::milliseconds(500));
  }
}

void JobManager::SchedulerLoop() {
  MutexLock lock(&mu_);
  while (!shutting_down_) {
    Tick();
    tick_cv_.wait_for(lock.native(), options_.tick);
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
  AssertPhasesHeld();
  for (const PhaseOutcome& outcome : phases_.CollectFinished()) {
    JobEntry* job = phases_.StillCurrent(outcome.job_id, outcome.generation);
    if (!job) continue;
    if (!outcome.status.ok()) {
      if (!phases_.HandleError(job, outcome))
        FailJob(job, outcome.what + " failed: " + outcome.status.ToString());
      continue;
    }
    const PhaseNext next = phases_.Apply(job, outcome);
    if (next.state == v1::JOB_STATE_UNSPECIFIED) {
      // Planned for the gang engine: the job stays in its state and waits for workers.
      job->phase_running = false;
      job->control.reset();
      job->rec.set_phase_attempts(0);
      jobs_.Persist(job, {jobs_.NewHistory(job, "planned", next.message)});
      jobs_.Touch(job);
      continue;
    }
    Transition(job, next.state, next.message);
  }
}

void JobManager::LaunchPhase(JobEntry* job) {
  const int attempts = job->rec.phase_attempts();
  if (attempts >= kMaxCrashedPhaseAttempts) {
    FailJob(job, StateName(job->state()) + " died with the coordinator or clusterd " +
                     std::to_string(attempts) +
                     " times (see their logs); not resumed into the same crash. Fix the input "
                     "and submit the job again");
    return;
  }
  // Marked before the call: a crash during it is known after a restart.
  job->rec.set_phase_attempts(attempts + 1);
  jobs_.Persist(job, {});
  AssertPhasesHeld();
  phases_.Launch(job);
}

void JobManager::AdvanceJobs(Clock::time_point now) {
  for (auto& [id, entry] : jobs_.all()) {
    JobEntry* job = entry.get();
    switch (job->state()) {
      case v1::JOB_STATE_PENDING: {
        auto* round = job->job().add_rounds();
        round->set_round(0);
        job->job().mutable_progress()->set_round(0);
        const v1::ClusteringSpec& cl = job->spec().clustering();
        if (!cl.label_set().empty()) {
          // A given label set is round 0's labels (one round: checked at submit). It is
          // never one of the job's own sets, so nothing here writes or deletes it.
          round->set_label_set(cl.label_set());
          job->job().set_label_set(cl.label_set());
          Transition(job, v1::JOB_STATE_TRAINING,
                     RoundText(0, job->spec().training().rounds()) + ": training on the given " +
                         "label set " + cl.label_set() + " (k " + std::to_string(cl.k()) + ", l " +
                         std::to_string(cl.l()) + ")");
        } else if (TrainsWithoutLabels(job->spec())) {
          // InfoNCE needs no labels: round 0 (MCL's stage 0) trains at once.
          Transition(job, v1::JOB_STATE_TRAINING,
                     (IsMcl(job->spec()) ? StageText(0, job->spec().mcl().stages())
                                         : RoundText(0, job->spec().training().rounds())) +
                         ": training with " + job->spec().loss().variant() +
                         " (no labels: nothing to cluster first)");
        } else if (cl.features().kind() == "model") {
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
        // With the gang engine the phase threads plan and seal; the gang runs in between.
        if (!job->phase_running && now >= job->retry_after &&
            KindFor(*job) == v1::ASSIGNMENT_KIND_NONE && !job->rec.has_attempt())
          LaunchPhase(job);
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
