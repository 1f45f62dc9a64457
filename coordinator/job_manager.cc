#include "coordinator/job_manager.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "clients/clusterd_client.h"
#include "clusterd/feature_gen.h"
#include "common/file_util.h"
#include "common/idx.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/net.h"
#include "common/npy.h"

namespace mlcd::coordinator {
namespace {

// For feature shards `<name>.npy` that each have `<name>.labels.npy` beside them (mlcd-worker
// embed writes the images' class labels there), writes their concatenation, in shard order,
// to `out` and returns true; returns false, writing nothing, when any shard has none.
StatusOr<bool> GatherShardClassLabels(const google::protobuf::RepeatedPtrField<std::string>& shards,
                                      const std::string& out) {
  std::vector<int64_t> all;
  for (const std::string& shard : shards) {
    const std::string suffix = ".npy";
    if (shard.size() <= suffix.size() ||
        shard.compare(shard.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return false;  // a directory of shards: their labels are not gathered
    }
    const std::string labels = shard.substr(0, shard.size() - suffix.size()) + ".labels.npy";
    if (!PathExists(labels)) return false;
    MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> part, ReadNpyAsInt64(labels));
    all.insert(all.end(), part.begin(), part.end());
  }
  if (all.empty()) return false;
  MLCD_RETURN_IF_ERROR(
      WriteNpy(out, NpyDtype::kInt64, {static_cast<int64_t>(all.size())}, all.data()));
  return true;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// "TRAINING" for JOB_STATE_TRAINING.
std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

std::string KindName(v1::AssignmentKind kind) {
  switch (kind) {
    case v1::ASSIGNMENT_KIND_TRAIN:
      return "train";
    case v1::ASSIGNMENT_KIND_EXTRACT:
      return "extract (mlcd-worker embed)";
    case v1::ASSIGNMENT_KIND_EVALUATE:
      return "evaluate (mlcd-worker eval)";
    default:
      return "none";
  }
}

std::string WorkerStateName(v1::WorkerState state) {
  switch (state) {
    case v1::WORKER_STATE_IDLE:
      return "idle";
    case v1::WORKER_STATE_BUSY:
      return "busy";
    case v1::WORKER_STATE_DRAINING:
      return "draining";
    case v1::WORKER_STATE_LOST:
      return "lost";
    default:
      return "unknown";
  }
}

// Codes after which a clusterd call is retried (the service is restarting or overloaded).
bool IsTransient(const Status& status) {
  switch (status.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:
    case StatusCode::kResourceExhausted:
    case StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

bool ValidName(const std::string& name, size_t max_size) {
  if (name.empty() || name.size() > max_size) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  }
  return true;
}

std::string JobIdFor(const std::string& name, int64_t seq) {
  std::string base;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') base += c;
  }
  if (base.empty()) base = "job";
  if (base.size() > 60) base = base.substr(0, 60);
  return base + "-" + std::to_string(seq);
}

std::string Fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// People count rounds and epochs from 1 ("round 2/3"); names and the API count from 0.
std::string RoundText(int r, int rounds) {
  return "round " + std::to_string(r + 1) + "/" + std::to_string(rounds);
}

// Why a job FAILED when its gang failed more often than spec.training.max_restarts allows.
std::string RestartsExhausted(int restarts, int max_restarts, const std::string& last_failure) {
  return "gang failed " + std::to_string(restarts) + " times (max_restarts " +
         std::to_string(max_restarts) + "); last failure: " + last_failure;
}

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

struct JobManager::WorkerEntry {
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

struct JobManager::JobEntry {
  v1::JobRecord rec;
  // Bumped on every visible change (WatchJob).
  uint64_t version = 1;
  // Bumped on every transition: results of phase threads started before it are dropped.
  uint64_t phase_generation = 0;
  bool phase_running = false;
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

  v1::Job& job() { return *rec.mutable_job(); }
  const v1::Job& job() const { return rec.job(); }
  v1::JobState state() const { return rec.job().state(); }
  const v1::JobSpec& spec() const { return rec.job().spec(); }
  v1::RoundStatus* round() {
    return job().rounds_size() ? job().mutable_rounds(job().rounds_size() - 1) : nullptr;
  }
};

// ---------------------------------------------------------------------------------------
// Opening and loading.

JobManager::JobManager(JobManagerOptions options, CoordinatorMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {}

StatusOr<std::unique_ptr<JobManager>> JobManager::Open(JobManagerOptions options,
                                                       CoordinatorMetrics* metrics) {
  if (options.data_dir.empty()) return Status::InvalidArgument("--data-dir is required");
  std::unique_ptr<JobManager> manager(new JobManager(std::move(options), metrics));
  MLCD_ASSIGN_OR_RETURN(manager->store_,
                        CoordinatorStore::Open(manager->options_.data_dir + "/db"));
  MLCD_RETURN_IF_ERROR(manager->Load());
  return manager;
}

JobManager::~JobManager() { Shutdown(); }

Status JobManager::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  MLCD_ASSIGN_OR_RETURN(next_job_seq_, store_->NextJobSeq());
  const auto now = Clock::now();
  const int64_t now_ms = NowUnixMs();

  std::vector<v1::WorkerRecord> workers;
  MLCD_RETURN_IF_ERROR(store_->LoadWorkers(&workers));
  for (auto& record : workers) {
    auto entry = std::make_unique<WorkerEntry>();
    entry->record = std::move(record);
    // Unknown since the restart: give it the idle timeout to show up.
    entry->last_seen = now;
    entry->last_seen_unix_ms = now_ms;
    workers_[entry->record.worker_id()] = std::move(entry);
  }

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
    JobEntry* job = entry.get();
    jobs_[job->job().id()] = std::move(entry);
    if (IsTerminal(job->state())) continue;
    const int max_restarts = job->spec().training().max_restarts();
    if (!job->rec.has_attempt() && job->job().restarts() > max_restarts) {
      // A gang's last allowed failure was written but not the FAILED that follows it (a
      // database of an older coordinator, which wrote them separately): finish the decision
      // instead of granting another attempt.
      Transition(job, v1::JOB_STATE_FAILED,
                 RestartsExhausted(job->job().restarts(), max_restarts, job->job().message()));
      continue;
    }
    ++recovered;
    std::vector<v1::JobHistoryEntry> history;
    std::string message = "coordinator restarted in state " + StateName(job->state());
    if (job->rec.has_attempt()) {
      // Reattach: the gang may still be running. Its members get a full heartbeat timeout to
      // show up; CheckGangs() restarts the phase from the last checkpoint if they do not.
      const auto& attempt = job->rec.attempt();
      for (const auto& member : attempt.members()) {
        if (member.reported()) continue;
        job->member_last_heard[member.assignment_id()] = now;
        assignment_jobs_[member.assignment_id()] = job->job().id();
        WorkerEntry* worker = FindWorker(member.worker_id());
        if (worker) {
          worker->state = v1::WORKER_STATE_BUSY;
          worker->delivered = true;
          worker->job_id = job->job().id();
          worker->assignment_id = member.assignment_id();
          worker->rank = member.rank();
        }
      }
      message += "; reattaching to gang " + attempt.id() + " (waiting for its workers' heartbeats)";
    }
    history.push_back(NewHistory(job, "recovered", message));
    job->job().set_message(message);
    Persist(job, std::move(history));
  }
  if (!jobs.empty() || !workers.empty()) {
    metrics_->Restarted(recovered);
    MLCD_LOG(INFO) << "reloaded " << jobs_.size() << " jobs (" << recovered << " unfinished) and "
                   << workers_.size() << " workers from " << store_->dir();
  }
  UpdateGauges();
  return Status::Ok();
}

void JobManager::Start() {
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

void JobManager::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_ && !scheduler_.joinable() && phase_threads_.empty()) return;
    shutting_down_ = true;
    for (auto& [id, job] : jobs_) {
      if (job->control) job->control->Cancel();
    }
  }
  work_cv_.notify_all();
  watch_cv_.notify_all();
  tick_cv_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  std::vector<PhaseThread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(phase_threads_);
  }
  for (auto& t : threads) {
    if (t.thread.joinable()) t.thread.join();
  }
}

// ---------------------------------------------------------------------------------------
// Persistence helpers.

v1::JobHistoryEntry JobManager::NewHistory(JobEntry* job, const std::string& kind,
                                           const std::string& message) {
  v1::JobHistoryEntry entry;
  int64_t seq = job->rec.next_history_seq();
  if (seq == 0) seq = 1;
  job->rec.set_next_history_seq(seq + 1);
  entry.set_seq(seq);
  entry.set_unix_ms(NowUnixMs());
  entry.set_kind(kind);
  entry.set_state(job->state());
  entry.set_round(job->job().progress().round());
  entry.set_message(message);
  if (job->rec.has_attempt()) entry.set_attempt_id(job->rec.attempt().id());
  return entry;
}

void JobManager::Persist(JobEntry* job, std::vector<v1::JobHistoryEntry> history) {
  job->job().set_updated_unix_ms(NowUnixMs());
  StoreBatch batch;
  // Each entry keeps the state it was made in (a gang abort written with the FAILED or
  // CANCELLED that follows it still says in which state the gang ran).
  for (const auto& entry : history) batch.AppendHistory(job->job().id(), entry);
  batch.PutJob(job->rec);
  Status s = store_->Commit(&batch);
  if (!s.ok()) {
    // What the coordinator does next would no longer match what a restart would read.
    MLCD_LOG(ERROR) << "cannot persist job " << job->job().id() << ": " << s.ToString()
                    << "; stopping";
    std::abort();
  }
}

void JobManager::Touch(JobEntry* job) {
  ++job->version;
  watch_cv_.notify_all();
}

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

  before.push_back(NewHistory(job, "state", message));
  Persist(job, std::move(before));
  MLCD_LOG(INFO) << "job " << job->job().id() << ": " << old_name << " -> " << StateName(state)
                 << (message.empty() ? "" : ": " + message);
  UpdateGauges();
  Touch(job);
  tick_cv_.notify_all();
}

void JobManager::EndJob(JobEntry* job, v1::JobState state, const std::string& message) {
  if (IsTerminal(job->state())) return;
  std::vector<v1::JobHistoryEntry> before;
  if (job->rec.has_attempt())
    before.push_back(DetachGang(job, message, /*counts_as_restart=*/false));
  Transition(job, state, message, std::move(before));
}

void JobManager::FailJob(JobEntry* job, const std::string& message) {
  EndJob(job, v1::JOB_STATE_FAILED, message);
}

// ---------------------------------------------------------------------------------------
// Lookups.

JobManager::JobEntry* JobManager::FindJob(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

JobManager::WorkerEntry* JobManager::FindWorker(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

bool JobManager::WorkerAlive(const WorkerEntry& worker, Clock::time_point now) const {
  if (worker.state == v1::WORKER_STATE_LOST) return false;
  return worker.polls_waiting > 0 || now - worker.last_seen < options_.idle_worker_timeout;
}

v1::AssignmentKind JobManager::KindFor(const JobEntry& job) const {
  switch (job.state()) {
    case v1::JOB_STATE_TRAINING:
      return v1::ASSIGNMENT_KIND_TRAIN;
    case v1::JOB_STATE_EXTRACTING:
      return v1::ASSIGNMENT_KIND_EXTRACT;
    case v1::JOB_STATE_EVALUATING:
      return v1::ASSIGNMENT_KIND_EVALUATE;
    default:
      return v1::ASSIGNMENT_KIND_NONE;
  }
}

std::string JobManager::JobDir(const std::string& job_id) const {
  return options_.data_dir + "/jobs/" + job_id;
}

v1::Job JobManager::PublicJob(const JobEntry& job) const {
  v1::Job out = job.job();
  if (!IsTerminal(job.state())) {
    (*out.mutable_phase_seconds())[StateName(job.state())] +=
        std::chrono::duration<double>(Clock::now() - job.state_entered).count();
  }
  out.set_attempts(static_cast<int32_t>(job.rec.job().attempts()));
  return out;
}

void JobManager::UpdateGauges() {
  std::map<std::string, int> jobs, workers;
  int gang = 0;
  for (const auto& [id, job] : jobs_) {
    ++jobs[StateName(job->state())];
    if (job->rec.has_attempt()) gang += job->rec.attempt().members_size();
  }
  for (const auto& [id, worker] : workers_) ++workers[WorkerStateName(worker->state)];
  metrics_->SetJobs(jobs);
  metrics_->SetWorkers(workers);
  metrics_->SetGangSize(gang);
}

void JobManager::ReleaseWorker(WorkerEntry* worker) {
  worker->state = v1::WORKER_STATE_IDLE;
  worker->job_id.clear();
  worker->assignment_id.clear();
  worker->rank = -1;
  worker->pending.reset();
  worker->delivered = false;
  worker->progress.Clear();
}

Status JobManager::CheckWorkerSupport(const v1::JobSpec& spec) const {
  const auto now = Clock::now();
  auto check = [&](v1::AssignmentKind kind, const std::string& field,
                   const std::string& hint) -> Status {
    int alive = 0, capable = 0;
    for (const auto& [id, worker] : workers_) {
      if (!WorkerAlive(*worker, now)) continue;
      ++alive;
      if (worker->Supports(kind)) ++capable;
    }
    if (alive > 0 && capable == 0) {
      return Status::FailedPrecondition(field + " needs workers that can " + KindName(kind) +
                                        ", and none of the " + std::to_string(alive) +
                                        " registered workers can; " + hint);
    }
    return Status::Ok();
  };
  if (spec.training().rounds() > 1) {
    MLCD_RETURN_IF_ERROR(
        check(v1::ASSIGNMENT_KIND_EXTRACT,
              "spec.training.rounds: " + std::to_string(spec.training().rounds()),
              "set rounds: 1 or start workers whose mlcd-worker has the embed command"));
  }
  if (spec.clustering().features().kind() == "model") {
    MLCD_RETURN_IF_ERROR(check(v1::ASSIGNMENT_KIND_EXTRACT, "spec.clustering.features.kind: model",
                               "use features kind pixels, random-projection or npy"));
  }
  if (spec.evaluation().enabled()) {
    MLCD_RETURN_IF_ERROR(
        check(v1::ASSIGNMENT_KIND_EVALUATE, "spec.evaluation.enabled: true",
              "set evaluation.enabled: false or start workers whose mlcd-worker has the eval "
              "command"));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// User API.

namespace {

// Problems with the files a spec names, checked on the coordinator's host (which shares the
// dataset and feature storage with clusterd and the workers).
std::vector<SpecProblem> InputProblems(const v1::JobSpec& spec) {
  std::vector<SpecProblem> problems;
  std::string images, labels;
  Status s = FindMnistSplit(spec.dataset().path(), "train", &images, &labels);
  if (!s.ok()) problems.push_back({"spec.dataset.path", s.message()});
  if (spec.evaluation().enabled() && spec.evaluation().dataset().path() != spec.dataset().path()) {
    Status e = FindMnistSplit(spec.evaluation().dataset().path(), "test", &images, &labels);
    if (!e.ok()) problems.push_back({"spec.evaluation.dataset.path", e.message()});
  }
  const auto& features = spec.clustering().features();
  if (features.kind() == "npy") {
    for (int i = 0; i < features.paths_size(); ++i) {
      if (!PathExists(features.paths(i))) {
        problems.push_back(
            {"spec.clustering.features.paths[" + std::to_string(i) + "]",
             "'" + features.paths(i) + "' does not exist (paths are read on the cluster's hosts)"});
      }
    }
  }
  const std::string& ckpt = spec.training().checkpoint_dir();
  if (!ckpt.empty() && ckpt[0] != '/') {
    problems.push_back({"spec.training.checkpoint_dir", "'" + ckpt + "' must be an absolute path"});
  }
  return problems;
}

}  // namespace

StatusOr<v1::Job> JobManager::SubmitJob(const v1::SubmitJobRequest& request) {
  if (request.request_id().size() > 200) {
    return Status::InvalidArgument("request_id: longer than 200 characters");
  }
  for (char c : request.request_id()) {
    if (!std::isprint(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("request_id: only printable characters are allowed");
    }
  }
  ParsedJob parsed;
  if (!request.spec_yaml().empty()) {
    if (request.has_spec() || request.has_metadata()) {
      return Status::InvalidArgument(
          "spec_yaml and spec/metadata are both set; send the job either as YAML text or as "
          "messages");
    }
    MLCD_ASSIGN_OR_RETURN(parsed, LoadJobSpecYaml(request.spec_yaml()));
  } else {
    if (!request.has_spec()) {
      return Status::InvalidArgument(
          "empty request: set spec_yaml (the job as YAML, e.g. `mlcdctl submit job.yaml`) or spec");
    }
    parsed.spec = request.spec();
    parsed.metadata = request.metadata();
    ApplyJobSpecDefaults(&parsed.spec);
    std::vector<SpecProblem> problems = JobMetadataProblems(parsed.metadata);
    for (auto& p : JobSpecProblems(parsed.spec)) problems.push_back(std::move(p));
    MLCD_RETURN_IF_ERROR(SpecProblemsToStatus(problems));
  }
  MLCD_RETURN_IF_ERROR(SpecProblemsToStatus(InputProblems(parsed.spec)));

  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) return Status::Unavailable("the coordinator is shutting down; retry");
  // A dry run answers as a dry run even for a used request id, saying what submitting would
  // do (return that job, or ALREADY_EXISTS for another spec).
  std::string existing_job;
  if (!request.request_id().empty()) {
    auto existing = store_->FindRequest(request.request_id());
    if (existing.ok()) {
      JobEntry* job = FindJob(*existing);
      if (!job)
        return Status::Internal("request id '" + request.request_id() + "' maps to a missing job");
      if (!google::protobuf::util::MessageDifferencer::Equals(job->spec(), parsed.spec) ||
          !google::protobuf::util::MessageDifferencer::Equals(job->job().metadata(),
                                                              parsed.metadata)) {
        return Status::AlreadyExists("request id '" + request.request_id() +
                                     "' was already used for job " + job->job().id() +
                                     " with a different spec; use a new request id");
      }
      if (!request.dry_run()) return PublicJob(*job);
      existing_job = job->job().id();
    } else if (existing.status().code() != StatusCode::kNotFound) {
      return existing.status();
    }
  }
  if (existing_job.empty()) MLCD_RETURN_IF_ERROR(CheckWorkerSupport(parsed.spec));

  auto entry = std::make_unique<JobEntry>();
  JobEntry* job = entry.get();
  const int64_t seq = next_job_seq_;
  v1::Job& j = job->job();
  j.set_id(request.dry_run() ? "" : JobIdFor(parsed.metadata.name(), seq));
  *j.mutable_metadata() = parsed.metadata;
  *j.mutable_spec() = parsed.spec;
  j.set_state(v1::JOB_STATE_PENDING);
  j.set_request_id(request.request_id());
  j.set_created_unix_ms(NowUnixMs());
  j.set_updated_unix_ms(j.created_unix_ms());
  j.mutable_progress()->set_rounds(parsed.spec.training().rounds());
  j.mutable_progress()->set_epochs_per_round(parsed.spec.training().epochs_per_round());
  j.set_message("submitted");
  job->rec.set_seq(seq);
  job->rec.set_state_entered_unix_ms(j.created_unix_ms());
  job->state_entered = Clock::now();
  if (request.dry_run()) {
    j.set_message("dry run: the spec is valid; nothing was created" +
                  (existing_job.empty()
                       ? std::string()
                       : " (request id '" + request.request_id() + "' already names job " +
                             existing_job + ": submitting returns that job)"));
    return j;
  }

  StoreBatch batch;
  auto history = NewHistory(
      job, "submitted",
      "submitted" + (request.request_id().empty() ? std::string()
                                                  : " with request id " + request.request_id()));
  batch.AppendHistory(j.id(), history);
  batch.PutJob(job->rec);
  if (!request.request_id().empty()) batch.PutRequest(request.request_id(), j.id());
  batch.PutNextJobSeq(seq + 1);
  MLCD_RETURN_IF_ERROR(store_->Commit(&batch));
  next_job_seq_ = seq + 1;
  v1::Job out = PublicJob(*job);
  MLCD_LOG(INFO) << "job " << j.id() << " submitted (world size "
                 << parsed.spec.training().world_size() << ", k " << parsed.spec.clustering().k()
                 << ", l " << parsed.spec.clustering().l() << ")";
  jobs_[j.id()] = std::move(entry);
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
    JobEntry* job = FindJob(request.id());
    if (!job) return Status::NotFound("job '" + request.id() + "' does not exist");
    out = PublicJob(*job);
  }
  if (request.include_history()) {
    std::vector<v1::JobHistoryEntry> history;
    MLCD_RETURN_IF_ERROR(store_->ReadHistory(request.id(), &history));
    for (auto& h : history) *out.add_history() = std::move(h);
  }
  return out;
}

StatusOr<v1::ListJobsResponse> JobManager::ListJobs(const v1::ListJobsRequest& request) {
  if (request.page_size() < 0)
    return Status::InvalidArgument("page_size: " + std::to_string(request.page_size()) +
                                   " must be >= 0");
  const int page_size = request.page_size() == 0 ? 100 : std::min(request.page_size(), 1000);
  std::set<int> states;
  for (int s : request.states()) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) {
      return Status::InvalidArgument("states: " + std::to_string(s) + " is not a job state");
    }
    states.insert(s);
  }
  int64_t before = INT64_MAX;
  if (!request.page_token().empty()) {
    char* end = nullptr;
    long long v = std::strtoll(request.page_token().c_str(), &end, 10);
    if (*end != '\0' || v <= 0) {
      return Status::InvalidArgument(
          "page_token: '" + request.page_token() +
          "' is not a token this server returned (pass next_page_token unchanged)");
    }
    before = v;
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobEntry*> matching;
  for (auto& [id, job] : jobs_) {
    if (job->rec.seq() >= before) continue;
    if (!states.empty() && !states.count(job->state())) continue;
    matching.push_back(job.get());
  }
  // Newest first.
  std::sort(matching.begin(), matching.end(),
            [](JobEntry* a, JobEntry* b) { return a->rec.seq() > b->rec.seq(); });
  v1::ListJobsResponse response;
  for (size_t i = 0; i < matching.size() && static_cast<int>(i) < page_size; ++i) {
    *response.add_jobs() = PublicJob(*matching[i]);
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
  JobEntry* job = FindJob(request.id());
  if (!job) return Status::NotFound("job '" + request.id() + "' does not exist");
  if (job->state() == v1::JOB_STATE_CANCELLED) return PublicJob(*job);
  if (IsTerminal(job->state())) {
    return Status::FailedPrecondition("job " + request.id() + " already ended " +
                                      StateName(job->state()) +
                                      "; only unfinished jobs can be cancelled");
  }
  const std::string reason =
      "cancelled" + (request.reason().empty() ? std::string() : ": " + request.reason());
  EndJob(job, v1::JOB_STATE_CANCELLED, reason);
  return PublicJob(*job);
}

Status JobManager::WatchJob(const v1::WatchJobRequest& request,
                            const std::function<bool(const v1::JobEvent&)>& send,
                            const std::function<bool()>& is_cancelled) {
  if (request.id().empty())
    return Status::InvalidArgument("id: empty; give a job id (see `mlcdctl list`)");
  std::unique_lock<std::mutex> lock(mu_);
  JobEntry* job = FindJob(request.id());
  if (!job) return Status::NotFound("job '" + request.id() + "' does not exist");
  uint64_t sent_version = 0;
  while (true) {
    if (job->version != sent_version) {
      v1::JobEvent event;
      *event.mutable_job() = PublicJob(*job);
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
  if (!ValidName(request.name(), 100)) {
    return Status::InvalidArgument(
        "name: '" + request.name() +
        "' must be 1 to 100 letters, digits, '-', '_' or '.' (stable per worker slot)");
  }
  if (request.host().empty())
    return Status::InvalidArgument("host: empty; give the host other workers reach this one at");
  if (request.rendezvous_port() < 0 || request.rendezvous_port() > 65535) {
    return Status::InvalidArgument("rendezvous_port: " + std::to_string(request.rendezvous_port()) +
                                   " is not in [0, 65535]");
  }
  for (int kind : request.kinds()) {
    if (!v1::AssignmentKind_IsValid(kind) || kind == v1::ASSIGNMENT_KIND_NONE) {
      return Status::InvalidArgument("kinds: " + std::to_string(kind) +
                                     " is not an assignment kind");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  WorkerEntry* worker = FindWorker(request.name());
  if (worker) {
    // A new process under the same name: whatever the old one ran is gone.
    auto it = assignment_jobs_.find(worker->assignment_id);
    if (!worker->assignment_id.empty() && it != assignment_jobs_.end()) {
      if (JobEntry* job = FindJob(it->second)) {
        // An assignment its old process never received was not a failure of the gang: abort
        // it (the new process may have another address) without counting a restart.
        AbortGang(job,
                  "worker " + request.name() + " registered again (its previous process is gone)",
                  /*counts_as_restart=*/worker->delivered);
      }
    }
    ReleaseWorker(worker);
  } else {
    auto entry = std::make_unique<WorkerEntry>();
    worker = entry.get();
    workers_[request.name()] = std::move(entry);
  }
  worker->record.set_worker_id(request.name());
  *worker->record.mutable_registration() = request;
  worker->record.set_registered_unix_ms(NowUnixMs());
  worker->state = v1::WORKER_STATE_IDLE;
  worker->last_seen = now;
  worker->last_seen_unix_ms = NowUnixMs();
  worker->offered_port = 0;  // set by its polls
  StoreBatch batch;
  batch.PutWorker(worker->record);
  MLCD_RETURN_IF_ERROR(store_->Commit(&batch));
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
  if (request.wait_seconds() < 0 || request.wait_seconds() > options_.max_poll_seconds) {
    return Status::InvalidArgument("wait_seconds: " + std::to_string(request.wait_seconds()) +
                                   " is not in [0, " + std::to_string(options_.max_poll_seconds) +
                                   "]");
  }
  if (request.rendezvous_port() < 0 || request.rendezvous_port() > 65535) {
    return Status::InvalidArgument("rendezvous_port: " + std::to_string(request.rendezvous_port()) +
                                   " is not in [0, 65535]");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_)
    return Status::Unavailable("the coordinator is shutting down; poll again once it is back");
  WorkerEntry* worker = FindWorker(request.worker_id());
  if (!worker) {
    return Status::NotFound("unknown worker '" + request.worker_id() +
                            "'; register first (RegisterWorker)");
  }
  auto now = Clock::now();
  worker->last_seen = now;
  worker->last_seen_unix_ms = NowUnixMs();
  if (request.rendezvous_port() > 0) worker->offered_port = request.rendezvous_port();
  if (worker->state == v1::WORKER_STATE_LOST) worker->state = v1::WORKER_STATE_IDLE;
  if (worker->state == v1::WORKER_STATE_DRAINING)
    ReleaseWorker(worker);  // polling: its child is gone
  if (worker->state == v1::WORKER_STATE_BUSY && worker->delivered) {
    auto it = assignment_jobs_.find(worker->assignment_id);
    JobEntry* job = it == assignment_jobs_.end() ? nullptr : FindJob(it->second);
    if (job) {
      AbortGang(job,
                "worker " + worker->record.worker_id() + " asked for new work while assigned " +
                    worker->assignment_id + " (its agent restarted or dropped the assignment)",
                true);
    }
    ReleaseWorker(worker);
  }
  UpdateGauges();
  const auto deadline = now + std::chrono::seconds(request.wait_seconds());
  ++worker->polls_waiting;
  tick_cv_.notify_all();
  while (!shutting_down_ && !worker->pending && !is_cancelled()) {
    now = Clock::now();
    if (now >= deadline) break;
    work_cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(500)));
    worker->last_seen = Clock::now();
    worker->last_seen_unix_ms = NowUnixMs();
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
    if (JobEntry* job = FindJob(worker->job_id))
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
  WorkerEntry* worker = FindWorker(request.worker_id());
  if (!worker) {
    response.set_action(v1::WORKER_ACTION_REREGISTER);
    response.set_reason("unknown worker '" + request.worker_id() + "'; register again");
    return response;
  }
  const auto now = Clock::now();
  worker->last_seen = now;
  worker->last_seen_unix_ms = NowUnixMs();
  if (worker->state == v1::WORKER_STATE_LOST) {
    ReleaseWorker(worker);
    UpdateGauges();
  }
  const std::string& aid = request.assignment_id();
  if (aid.empty()) return response;
  auto it = assignment_jobs_.find(aid);
  JobEntry* job = it == assignment_jobs_.end() ? nullptr : FindJob(it->second);
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
    auto why = abort_reasons_.find(aid);
    response.set_reason(
        "assignment " + aid + " is no longer active: " +
        (why != abort_reasons_.end() ? why->second : "its gang was aborted or its job ended"));
    return response;
  }
  job->member_last_heard[aid] = now;
  worker->delivered = true;
  worker->progress = request.progress();
  if (member->rank() == 0) {
    UpdateProgress(job, request.progress(), now);
    MaybeCommitCheckpoint(job, request.progress());
  }
  return response;
}

StatusOr<v1::ReportAssignmentResponse> JobManager::ReportAssignment(
    const v1::ReportAssignmentRequest& request) {
  if (request.assignment_id().empty()) return Status::InvalidArgument("assignment_id: empty");
  std::lock_guard<std::mutex> lock(mu_);
  v1::ReportAssignmentResponse response;
  WorkerEntry* worker = FindWorker(request.worker_id());
  const std::string& aid = request.assignment_id();
  if (worker) {
    worker->last_seen = Clock::now();
    worker->last_seen_unix_ms = NowUnixMs();
    if (worker->assignment_id == aid || worker->state == v1::WORKER_STATE_LOST)
      ReleaseWorker(worker);
  }
  auto it = assignment_jobs_.find(aid);
  JobEntry* job = it == assignment_jobs_.end() ? nullptr : FindJob(it->second);
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
  assignment_jobs_.erase(aid);
  job->member_last_heard.erase(aid);
  member->set_reported(true);
  member->set_succeeded(request.succeeded());
  for (const auto& path : request.output_paths()) member->add_output_paths(path);
  if (request.has_evaluation()) *member->mutable_evaluation() = request.evaluation();
  const int rank = member->rank();
  const std::string worker_id = member->worker_id();
  if (rank == 0) {
    UpdateProgress(job, request.progress(), Clock::now());
    MaybeCommitCheckpoint(job, request.progress());
  }
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
      Persist(job,
              {NewHistory(job, "member_finished", "rank " + std::to_string(rank) + " finished")});
    }
  }
  UpdateGauges();
  tick_cv_.notify_all();
  return response;
}

StatusOr<v1::ListWorkersResponse> JobManager::ListWorkers(const v1::ListWorkersRequest&) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::ListWorkersResponse response;
  for (const auto& [id, worker] : workers_) {
    auto* info = response.add_workers();
    info->set_worker_id(id);
    *info->mutable_registration() = worker->record.registration();
    info->set_state(worker->state);
    info->set_job_id(worker->job_id);
    info->set_assignment_id(worker->assignment_id);
    info->set_rank(worker->rank);
    info->set_last_seen_unix_ms(worker->last_seen_unix_ms);
    *info->mutable_progress() = worker->progress;
    info->set_registered_unix_ms(worker->record.registered_unix_ms());
  }
  return response;
}

// ---------------------------------------------------------------------------------------
// Progress and commits.

void JobManager::UpdateProgress(JobEntry* job, const v1::WorkerProgress& progress,
                                Clock::time_point now) {
  if (!job->rec.has_attempt()) return;
  auto* p = job->job().mutable_progress();
  const auto kind = job->rec.attempt().kind();
  if (kind == v1::ASSIGNMENT_KIND_TRAIN) {
    // Nothing to show until the child has taken a step of this attempt.
    if (progress.total_steps() <= job->rec.attempt().start_global_step()) return;
    p->set_round(progress.round());
    p->set_epoch(progress.epoch());
    p->set_step(progress.step());
    if (progress.steps_per_epoch() > 0) p->set_steps_per_epoch(progress.steps_per_epoch());
    p->set_total_steps(std::max(p->total_steps(), progress.total_steps()));
    p->set_loss(progress.loss());
    p->set_samples_per_second(progress.samples_per_second());
    p->set_mean_positive_cosine(progress.mean_positive_cosine());
    p->set_mean_negative_cosine(progress.mean_negative_cosine());
    if (progress.job_total_steps() > 0) p->set_job_total_steps(progress.job_total_steps());
    const int64_t step = progress.total_steps();
    if (job->job().first_step_unix_ms() == 0 && step > job->rec.attempt().start_global_step()) {
      job->job().set_first_step_unix_ms(NowUnixMs());
    }
    if (job->rate_step < 0 || step < job->rate_step) {
      job->rate_step = step;
      job->rate_time = now;
    } else if (step > job->rate_step) {
      const double dt = std::chrono::duration<double>(now - job->rate_time).count();
      if (dt > 0.2) {
        const double rate = (step - job->rate_step) / dt;
        job->steps_per_second =
            job->steps_per_second > 0 ? 0.7 * job->steps_per_second + 0.3 * rate : rate;
        job->rate_step = step;
        job->rate_time = now;
      }
    }
    if (job->steps_per_second > 0 && p->job_total_steps() > 0) {
      p->set_eta_seconds(std::max<int64_t>(0, p->job_total_steps() - p->total_steps()) /
                         job->steps_per_second);
    }
    p->set_detail("training round " + std::to_string(progress.round() + 1) + "/" +
                  std::to_string(job->spec().training().rounds()) + ", epoch " +
                  std::to_string(progress.epoch() + 1) + "/" +
                  std::to_string(job->spec().training().epochs_per_round()) + " on " +
                  std::to_string(job->rec.attempt().world_size()) + " workers");
  } else if (progress.steps_per_epoch() > 0) {
    p->set_detail(
        std::string(kind == v1::ASSIGNMENT_KIND_EXTRACT ? "extracting features" : "evaluating") +
        (progress.activity().empty() ? "" : " (" + progress.activity() + ")") + ": " +
        std::to_string(progress.step()) + "/" + std::to_string(progress.steps_per_epoch()));
  }
  Touch(job);
}

void JobManager::MaybeCommitCheckpoint(JobEntry* job, const v1::WorkerProgress& progress) {
  if (!job->rec.has_attempt() || job->rec.attempt().kind() != v1::ASSIGNMENT_KIND_TRAIN) return;
  if (progress.checkpoint().empty()) return;
  const auto& attempt = job->rec.attempt();
  const int r = progress.checkpoint_round();
  if (r != attempt.round() || r >= job->job().rounds_size()) return;
  v1::RoundStatus* round = job->job().mutable_rounds(r);
  const int64_t step = progress.checkpoint_global_step();
  const bool complete = progress.checkpoint_epoch_complete();
  const bool newer =
      round->checkpoint().empty() || step > round->checkpoint_global_step() ||
      (step == round->checkpoint_global_step() && complete && !round->checkpoint_epoch_complete());
  if (!newer || progress.checkpoint_epoch() < attempt.first_epoch()) return;
  if (complete && progress.checkpoint_epoch() < round->epochs_committed()) {
    MLCD_LOG(ERROR) << "job " << job->job().id() << ": gang " << attempt.id() << " reported epoch "
                    << progress.checkpoint_epoch() << " of round " << r
                    << " again, though it was committed; keeping the first commit";
    return;
  }
  round->set_checkpoint(progress.checkpoint());
  round->set_checkpoint_global_step(step);
  round->set_checkpoint_epoch(progress.checkpoint_epoch());
  round->set_checkpoint_epoch_complete(complete);
  job->job().set_checkpoint(progress.checkpoint());
  auto* p = job->job().mutable_progress();
  p->set_total_steps(std::max(p->total_steps(), step));
  std::vector<v1::JobHistoryEntry> history;
  if (complete) {
    // The end of epoch e also completes every earlier epoch of this gang whose own
    // checkpoint event was not seen (several epochs between two heartbeats, or while the
    // coordinator was down): each is committed once, here.
    const std::string round_text = RoundText(r, job->spec().training().rounds());
    for (int e = round->epochs_committed(); e <= progress.checkpoint_epoch(); ++e) {
      const bool implied = e < progress.checkpoint_epoch();
      auto entry =
          NewHistory(job, "epoch_committed",
                     "epoch " + std::to_string(e + 1) + " of " + round_text + " committed" +
                         (implied ? " (completed by the checkpoint of epoch " +
                                        std::to_string(progress.checkpoint_epoch() + 1) + ")"
                                  : " at global step " + std::to_string(step)));
      entry.set_round(r);
      entry.set_epoch(e);
      entry.set_global_step(implied ? 0 : step);
      entry.set_checkpoint(implied ? "" : progress.checkpoint());
      history.push_back(entry);
      metrics_->EpochCommitted();
    }
    round->set_epochs_committed(progress.checkpoint_epoch() + 1);
  } else {
    auto entry =
        NewHistory(job, "checkpoint_committed",
                   "mid-epoch checkpoint at global step " + std::to_string(step) + " committed");
    entry.set_round(r);
    entry.set_epoch(progress.checkpoint_epoch());
    entry.set_global_step(step);
    entry.set_checkpoint(progress.checkpoint());
    history.push_back(entry);
  }
  Persist(job, std::move(history));
  Touch(job);
}

// ---------------------------------------------------------------------------------------
// Gangs.

void JobManager::StartGang(JobEntry* job, v1::AssignmentKind kind,
                           std::vector<WorkerEntry*> workers) {
  const auto& spec = job->spec();
  const int n = job->job().attempts() + 1;
  job->job().set_attempts(n);
  v1::GangAttempt attempt;
  attempt.set_id(job->job().id() + "-a" + std::to_string(n));
  attempt.set_kind(kind);
  attempt.set_world_size(static_cast<int32_t>(workers.size()));
  attempt.set_started_unix_ms(NowUnixMs());
  const int r = job->job().rounds_size() - 1;
  attempt.set_round(r);
  v1::RoundStatus* round = job->round();
  const v1::RoundStatus* previous = r > 0 ? &job->job().rounds(r - 1) : nullptr;
  if (kind == v1::ASSIGNMENT_KIND_TRAIN) {
    attempt.set_first_epoch(round->epochs_committed());
    attempt.set_end_epoch(spec.training().epochs_per_round());
    if (!round->checkpoint().empty()) {
      attempt.set_resume_checkpoint(round->checkpoint());
      attempt.set_start_global_step(round->checkpoint_global_step());
    } else if (previous) {
      attempt.set_resume_checkpoint(previous->checkpoint());
      attempt.set_start_global_step(previous->checkpoint_global_step());
    }
  } else if (kind == v1::ASSIGNMENT_KIND_EXTRACT) {
    if (previous) attempt.set_resume_checkpoint(previous->checkpoint());
    attempt.set_output_dir(JobDir(job->job().id()) + "/r" + std::to_string(r) + "/features-a" +
                           std::to_string(n));
  } else {
    attempt.set_resume_checkpoint(round->checkpoint());
    attempt.set_output_dir(JobDir(job->job().id()) + "/eval-a" + std::to_string(n));
  }
  WorkerEntry* rank0 = workers[0];
  const int port = rank0->offered_port > 0 ? rank0->offered_port
                                           : rank0->record.registration().rendezvous_port();
  attempt.set_rendezvous_address(JoinHostPort(rank0->record.registration().host(), port));
  for (size_t i = 0; i < workers.size(); ++i) {
    auto* m = attempt.add_members();
    m->set_worker_id(workers[i]->record.worker_id());
    m->set_worker_name(workers[i]->record.registration().name());
    m->set_rank(static_cast<int32_t>(i));
    m->set_assignment_id(attempt.id() + "-r" + std::to_string(i));
  }
  *job->rec.mutable_attempt() = attempt;
  job->short_since.reset();
  auto* p = job->job().mutable_progress();
  p->set_gang_size(attempt.world_size());
  p->set_round(r);
  if (kind == v1::ASSIGNMENT_KIND_TRAIN) p->set_epoch(attempt.first_epoch());
  p->set_detail("starting " + KindName(kind) + " on " + std::to_string(workers.size()) +
                " workers");
  job->rate_step = -1;
  job->steps_per_second = 0;
  auto entry = NewHistory(
      job, "gang_started",
      KindName(kind) + " gang " + attempt.id() + " of " + std::to_string(workers.size()) +
          " workers, rendezvous " + attempt.rendezvous_address() +
          (attempt.resume_checkpoint().empty() ? "" : ", resuming " + attempt.resume_checkpoint()));
  entry.set_assignment_kind(kind);
  entry.set_first_epoch(attempt.first_epoch());
  entry.set_end_epoch(attempt.end_epoch());
  entry.set_world_size(attempt.world_size());
  entry.set_global_step(attempt.start_global_step());
  entry.set_checkpoint(attempt.resume_checkpoint());
  Persist(job, {entry});  // persisted before any worker hears of it

  const std::string checkpoint_dir = spec.training().checkpoint_dir().empty()
                                         ? JobDir(job->job().id()) + "/ckpt"
                                         : spec.training().checkpoint_dir();
  const auto now = Clock::now();
  for (size_t i = 0; i < workers.size(); ++i) {
    const auto& m = attempt.members(static_cast<int>(i));
    v1::Assignment a;
    a.set_id(m.assignment_id());
    a.set_kind(kind);
    a.set_job_id(job->job().id());
    a.set_rank(m.rank());
    a.set_world_size(attempt.world_size());
    a.set_rendezvous_address(attempt.rendezvous_address());
    *a.mutable_spec() = spec;
    a.set_round(r);
    a.set_first_epoch(attempt.first_epoch());
    a.set_end_epoch(attempt.end_epoch());
    a.set_label_set(round->label_set());
    a.set_centroids_path(round->centroids_path());
    a.set_labelstore_address(options_.labelstore_address);
    a.set_resume_checkpoint(attempt.resume_checkpoint());
    a.set_checkpoint_dir(checkpoint_dir);
    a.set_output_dir(attempt.output_dir());
    a.set_attempt_id(attempt.id());
    a.set_heartbeat_interval_ms(static_cast<int32_t>(options_.heartbeat_interval.count()));
    a.set_start_global_step(attempt.start_global_step());
    WorkerEntry* w = workers[i];
    w->state = v1::WORKER_STATE_BUSY;
    w->job_id = job->job().id();
    w->assignment_id = m.assignment_id();
    w->rank = m.rank();
    w->pending = std::move(a);
    w->delivered = false;
    w->progress.Clear();
    job->member_last_heard[m.assignment_id()] = now;
    assignment_jobs_[m.assignment_id()] = job->job().id();
  }
  metrics_->GangStarted();
  MLCD_LOG(INFO) << "job " << job->job().id() << ": started " << KindName(kind) << " gang "
                 << attempt.id() << " (" << workers.size() << " workers, rendezvous "
                 << attempt.rendezvous_address() << ")";
  UpdateGauges();
  Touch(job);
  work_cv_.notify_all();
}

v1::JobHistoryEntry JobManager::DetachGang(JobEntry* job, const std::string& reason,
                                           bool counts_as_restart) {
  const v1::GangAttempt attempt = job->rec.attempt();
  for (const auto& m : attempt.members()) {
    assignment_jobs_.erase(m.assignment_id());
    abort_reasons_[m.assignment_id()] = reason;
    abort_order_.push_back(m.assignment_id());
    if (abort_order_.size() > 4096) {
      abort_reasons_.erase(abort_order_.front());
      abort_order_.erase(abort_order_.begin());
    }
    WorkerEntry* w = FindWorker(m.worker_id());
    if (!w || w->assignment_id != m.assignment_id()) continue;
    if (w->pending && !w->delivered) {
      ReleaseWorker(w);  // never started it
    } else if (w->state == v1::WORKER_STATE_BUSY) {
      w->state = v1::WORKER_STATE_DRAINING;  // told ABORT in its next heartbeat
    }
  }
  job->rec.clear_attempt();
  job->member_last_heard.clear();
  job->job().mutable_progress()->set_gang_size(0);
  auto entry = NewHistory(job, "gang_aborted", reason);
  entry.set_attempt_id(attempt.id());
  entry.set_assignment_kind(attempt.kind());
  entry.set_round(attempt.round());
  if (counts_as_restart) {
    job->job().set_restarts(job->job().restarts() + 1);
    job->rec.set_phase_failures(job->rec.phase_failures() + 1);
    metrics_->GangRestarted();
  }
  job->job().set_message("gang " + attempt.id() + " aborted: " + reason);
  MLCD_LOG(WARNING) << "job " << job->job().id() << ": gang " << attempt.id()
                    << " aborted: " << reason;
  work_cv_.notify_all();
  return entry;
}

void JobManager::AbortGang(JobEntry* job, const std::string& reason, bool counts_as_restart) {
  if (!job->rec.has_attempt()) return;
  auto entry = DetachGang(job, reason, counts_as_restart);
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
  Persist(job, {std::move(entry)});
  UpdateGauges();
  Touch(job);
}

void JobManager::FinishGang(JobEntry* job) {
  const v1::GangAttempt attempt = job->rec.attempt();
  v1::RoundStatus* round = job->job().mutable_rounds(attempt.round());
  if (attempt.kind() == v1::ASSIGNMENT_KIND_TRAIN) {
    if (round->epochs_committed() < attempt.end_epoch()) {
      AbortGang(job,
                "the gang finished but rank 0 never reported the checkpoint of epoch " +
                    std::to_string(attempt.end_epoch() - 1) +
                    " (epochs committed: " + std::to_string(round->epochs_committed()) + ")",
                true);
      return;
    }
    job->rec.clear_attempt();
    job->rec.set_phase_failures(0);
    job->job().mutable_progress()->set_gang_size(0);
    round->set_trained(true);
    auto entry = NewHistory(job, "round_trained",
                            RoundText(attempt.round(), job->spec().training().rounds()) +
                                " trained to global step " +
                                std::to_string(round->checkpoint_global_step()));
    entry.set_attempt_id(attempt.id());
    entry.set_global_step(round->checkpoint_global_step());
    entry.set_checkpoint(round->checkpoint());
    Persist(job, {entry});
    AfterRoundTrained(job);
    return;
  }
  if (attempt.kind() == v1::ASSIGNMENT_KIND_EXTRACT) {
    std::vector<std::string> outputs;
    for (const auto& m : attempt.members()) {
      for (const auto& p : m.output_paths()) outputs.push_back(p);
    }
    std::sort(outputs.begin(), outputs.end());
    outputs.erase(std::unique(outputs.begin(), outputs.end()), outputs.end());
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
  JoinFinishedThreads();
  CheckWorkers(now);
  CheckGangs(now);
  AdvanceJobs(now);
  ScheduleGangs(now);
}

void JobManager::JoinFinishedThreads() {
  for (auto it = phase_threads_.begin(); it != phase_threads_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = phase_threads_.erase(it);
    } else {
      ++it;
    }
  }
}

void JobManager::CheckWorkers(Clock::time_point now) {
  bool changed = false;
  for (auto it = workers_.begin(); it != workers_.end();) {
    WorkerEntry* w = it->second.get();
    const auto silent = now - w->last_seen;
    if (w->polls_waiting > 0) {
      ++it;
      continue;
    }
    if ((w->state == v1::WORKER_STATE_IDLE || w->state == v1::WORKER_STATE_DRAINING) &&
        silent > options_.idle_worker_timeout) {
      MLCD_LOG(WARNING) << "worker " << it->first << " silent for "
                        << std::chrono::duration_cast<std::chrono::seconds>(silent).count()
                        << " s: lost";
      ReleaseWorker(w);
      w->state = v1::WORKER_STATE_LOST;
      changed = true;
    }
    if (w->state == v1::WORKER_STATE_LOST && silent > options_.lost_worker_expiry) {
      StoreBatch batch;
      batch.DeleteWorker(it->first);
      Status s = store_->Commit(&batch);
      if (!s.ok()) {
        MLCD_LOG(ERROR) << "cannot forget worker " << it->first << ": " << s.ToString();
      }
      it = workers_.erase(it);
      changed = true;
      continue;
    }
    ++it;
  }
  if (changed) UpdateGauges();
}

void JobManager::CheckGangs(Clock::time_point now) {
  for (auto& [id, job] : jobs_) {
    if (!job->rec.has_attempt()) continue;
    const auto timeout = std::chrono::seconds(job->spec().training().heartbeat_timeout_seconds());
    for (const auto& m : job->rec.attempt().members()) {
      if (m.reported()) continue;
      auto heard = job->member_last_heard.find(m.assignment_id());
      if (heard == job->member_last_heard.end()) {
        job->member_last_heard[m.assignment_id()] = now;
        continue;
      }
      if (now - heard->second <= timeout) continue;
      const auto silent =
          std::chrono::duration_cast<std::chrono::seconds>(now - heard->second).count();
      if (WorkerEntry* w = FindWorker(m.worker_id())) {
        if (w->assignment_id == m.assignment_id()) {
          ReleaseWorker(w);
          w->state = v1::WORKER_STATE_LOST;
        }
      }
      AbortGang(job.get(),
                "worker " + m.worker_id() + " (rank " + std::to_string(m.rank()) +
                    ") sent no heartbeat for " + std::to_string(silent) +
                    " s (heartbeat_timeout_seconds " +
                    std::to_string(job->spec().training().heartbeat_timeout_seconds()) + ")",
                true);
      break;
    }
  }
}

void JobManager::AdvanceJobs(Clock::time_point now) {
  for (auto& [id, entry] : jobs_) {
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
        if (!job->phase_running && now >= job->retry_after) LaunchPhase(job);
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

int JobManager::WantedGangSize(JobEntry* job, int available, Clock::time_point now) {
  const auto kind = KindFor(*job);
  const int full = kind == v1::ASSIGNMENT_KIND_EVALUATE ? 1 : job->spec().training().world_size();
  if (available >= full) {
    job->short_since.reset();
    return full;
  }
  if (job->rec.phase_failures() == 0 || available == 0) return full;
  if (!job->short_since) job->short_since = now;
  const auto grace = std::chrono::seconds(job->spec().training().heartbeat_timeout_seconds());
  if (now - *job->short_since < grace) return full;
  for (int w = available; w >= 1; --w) {
    if (kind == v1::ASSIGNMENT_KIND_TRAIN &&
        (job->spec().training().batch_size() % w != 0 || w > job->spec().clustering().k())) {
      continue;
    }
    return w;
  }
  return full;
}

void JobManager::ScheduleGangs(Clock::time_point now) {
  std::vector<JobEntry*> waiting;
  for (auto& [id, job] : jobs_) {
    const auto kind = KindFor(*job);
    if (kind != v1::ASSIGNMENT_KIND_NONE && !job->rec.has_attempt() && !IsTerminal(job->state())) {
      waiting.push_back(job.get());
    }
  }
  std::sort(waiting.begin(), waiting.end(),
            [](JobEntry* a, JobEntry* b) { return a->rec.seq() < b->rec.seq(); });
  std::vector<WorkerEntry*> idle;
  for (auto& [id, w] : workers_) {
    // A worker is ready once it polls with a rendezvous port (it may become rank 0).
    const bool has_port = w->offered_port > 0 || w->record.registration().rendezvous_port() > 0;
    if (w->state == v1::WORKER_STATE_IDLE && !w->pending && has_port && WorkerAlive(*w, now))
      idle.push_back(w.get());
  }
  // Workers waiting in a poll first: they get the assignment at once.
  std::stable_sort(idle.begin(), idle.end(), [](WorkerEntry* a, WorkerEntry* b) {
    return a->polls_waiting > b->polls_waiting;
  });
  int still_waiting = 0;
  // The first job that could run but waits for idle workers: the jobs behind it wait too
  // (FIFO, so a big gang is never starved by smaller ones).
  const JobEntry* first_in_line = nullptr;
  for (JobEntry* job : waiting) {
    const auto kind = KindFor(*job);
    std::vector<WorkerEntry*> capable;
    for (WorkerEntry* w : idle) {
      if (w->Supports(kind)) capable.push_back(w);
    }
    int alive = 0, alive_capable = 0;
    for (auto& [id, w] : workers_) {
      if (!WorkerAlive(*w, now)) continue;
      ++alive;
      if (w->Supports(kind)) ++alive_capable;
    }
    if (alive > 0 && alive_capable == 0) {
      FailJob(job, "no registered worker can " + KindName(kind) + " (" + std::to_string(alive) +
                       " workers registered); the job cannot go on");
      continue;
    }
    const int want = WantedGangSize(job, static_cast<int>(capable.size()), now);
    if (want > alive_capable) {
      // Cannot start until more workers register: it must not hold back jobs that can run.
      SetDetail(job, "needs " + std::to_string(want) + " workers that can " + KindName(kind) +
                         ", " + std::to_string(alive_capable) +
                         " registered (later jobs that fit run meanwhile)");
      ++still_waiting;
      continue;
    }
    if (first_in_line) {
      SetDetail(job, "queued behind job " + first_in_line->job().id() +
                         ", which waits for idle workers first");
      ++still_waiting;
      continue;
    }
    if (static_cast<int>(capable.size()) >= want) {
      std::vector<WorkerEntry*> gang(capable.begin(), capable.begin() + want);
      for (WorkerEntry* w : gang) idle.erase(std::find(idle.begin(), idle.end(), w));
      StartGang(job, kind, gang);
      continue;
    }
    SetDetail(job, "waiting for " + std::to_string(want) + " idle workers that can " +
                       KindName(kind) + " (" + std::to_string(capable.size()) + " idle, " +
                       std::to_string(alive) + " registered)");
    ++still_waiting;
    first_in_line = job;
  }
  metrics_->SetJobsWaitingForWorkers(still_waiting);
}

void JobManager::SetDetail(JobEntry* job, const std::string& detail) {
  if (job->job().progress().detail() == detail) return;
  job->job().mutable_progress()->set_detail(detail);
  Touch(job);
}

// ---------------------------------------------------------------------------------------
// Clustering and assignment phases (clusterd).

void JobManager::LaunchPhase(JobEntry* job) {
  job->phase_running = true;
  job->control = std::make_shared<clusterd::CallControl>();
  auto done = std::make_shared<std::atomic<bool>>(false);
  const std::string id = job->job().id();
  const uint64_t generation = job->phase_generation;
  v1::JobRecord snapshot = job->rec;
  auto control = job->control;
  const bool clustering = job->state() == v1::JOB_STATE_CLUSTERING;
  PhaseThread t;
  t.done = done;
  t.thread = std::thread(
      [this, id, generation, snapshot = std::move(snapshot), control, done, clustering]() mutable {
        if (clustering) {
          RunClusteringPhase(id, generation, std::move(snapshot), control);
        } else {
          RunAssigningPhase(id, generation, std::move(snapshot), control);
        }
        done->store(true);
        tick_cv_.notify_all();
      });
  phase_threads_.push_back(std::move(t));
}

JobManager::JobEntry* JobManager::PhaseStillCurrent(const std::string& job_id,
                                                    uint64_t phase_generation) {
  if (shutting_down_) return nullptr;
  JobEntry* job = FindJob(job_id);
  if (!job || job->phase_generation != phase_generation || IsTerminal(job->state())) return nullptr;
  return job;
}

void JobManager::PhaseError(JobEntry* job, const std::string& what, const Status& status) {
  job->phase_running = false;
  job->control.reset();
  if (IsTransient(status)) {
    job->transient_failures = std::min(job->transient_failures + 1, 6);
    const int delay = 1 << (job->transient_failures - 1);  // 1, 2, 4 ... 32 s
    job->retry_after = Clock::now() + std::chrono::seconds(delay);
    job->job().mutable_progress()->set_detail(what + " failed, retrying in " +
                                              std::to_string(delay) + " s: " + status.ToString());
    job->job().set_message(job->job().progress().detail());
    MLCD_LOG(WARNING) << "job " << job->job().id() << ": " << job->job().progress().detail();
    Touch(job);
    return;
  }
  FailJob(job, what + " failed: " + status.ToString());
}

void JobManager::RunClusteringPhase(std::string job_id, uint64_t generation, v1::JobRecord snapshot,
                                    std::shared_ptr<clusterd::CallControl> control) {
  const v1::JobSpec& spec = snapshot.job().spec();
  const int r = snapshot.job().rounds_size() - 1;
  v1::RoundStatus round = snapshot.job().rounds(r);
  auto set_detail = [&](const std::string& detail) {
    std::lock_guard<std::mutex> lock(mu_);
    if (JobEntry* job = PhaseStillCurrent(job_id, generation)) {
      job->job().mutable_progress()->set_detail(detail);
      Touch(job);
    }
  };
  const std::string what = "clustering " + RoundText(r, spec.training().rounds());
  Status status;
  if (round.feature_paths().empty()) {
    const auto& features = spec.clustering().features();
    if (features.kind() == "npy") {
      for (const auto& p : features.paths()) round.add_feature_paths(p);
      round.set_feature_source("npy");
    } else if (features.kind() == "pixels" || features.kind() == "random-projection") {
      clusterd::FashionMnistFeatureOptions opt;
      opt.kind = features.kind();
      opt.limit = static_cast<int64_t>(spec.dataset().limit());
      opt.dim = features.dim();
      opt.seed = features.seed();
      opt.dataset_dir = spec.dataset().path();
      char name[160];
      std::snprintf(name, sizeof(name), "%s-%s-d%d-s%llu-n%llu-%016llx",
                    spec.dataset().format().c_str(), features.kind().c_str(),
                    features.kind() == "pixels" ? 784 : features.dim(),
                    static_cast<unsigned long long>(features.seed()),
                    static_cast<unsigned long long>(spec.dataset().limit()),
                    static_cast<unsigned long long>(Fnv1a(spec.dataset().path())));
      const std::string dir = options_.data_dir + "/features/" + name;
      opt.features_out = dir + "/features.npy";
      opt.labels_out = dir + "/classes.labels.npy";
      // The labels file is written last: when it exists, both are complete.
      if (!PathExists(opt.labels_out) || !PathExists(opt.features_out)) {
        set_detail("writing round-0 " + features.kind() + " features of " +
                   spec.dataset().format());
        auto info = clusterd::WriteFashionMnistFeatures(opt);
        if (!info.ok()) status = info.status().WithContext("writing round-0 features");
      }
      round.add_feature_paths(opt.features_out);
      round.set_class_labels_path(opt.labels_out);
      round.set_feature_source(features.kind() + " (" + dir + ")");
    } else {
      status = Status::Internal("round " + std::to_string(r) + " has no features to cluster");
    }
  }
  v1::ClusterResult result;
  if (status.ok()) {
    const std::string dir = JobDir(snapshot.job().id()) + "/r" + std::to_string(r);
    status = MakeDirs(dir);
    if (status.ok() && round.class_labels_path().empty()) {
      // Extracted shards carry their images' class labels when the dataset has them: gather
      // them so a model-feature round reports label quality (A.8) like round 0 does.
      auto gathered = GatherShardClassLabels(round.feature_paths(), dir + "/class-labels.npy");
      if (!gathered.ok()) {
        MLCD_LOG(WARNING) << "round " << r << " of job " << snapshot.job().id()
                          << ": no label quality report: " << gathered.status().ToString();
      } else if (*gathered) {
        round.set_class_labels_path(dir + "/class-labels.npy");
      }
    }
    if (status.ok()) {
      round.set_centroids_path(dir + "/centroids.npy");
      v1::ClusterRequest request;
      for (const auto& p : round.feature_paths()) request.mutable_features()->add_paths(p);
      request.set_k(spec.clustering().k());
      request.set_niter(spec.clustering().niter());
      request.set_seed(spec.clustering().seed() + static_cast<uint64_t>(r));
      request.set_max_points_per_centroid(spec.clustering().max_points_per_centroid());
      request.set_centroids_out(round.centroids_path());
      request.set_request_id(snapshot.job().id() + "/r" + std::to_string(r));
      // ASSIGNING comes next and its top-1 labels give the same size summary: one pass less.
      request.set_skip_size_pass(true);
      set_detail("k-means: k " + std::to_string(spec.clustering().k()) + " on " +
                 std::to_string(round.feature_paths_size()) + " feature shards");
      clusterd::ClusterdClient client(options_.clusterd_address);
      const int niter = spec.clustering().niter();
      auto res = client.Cluster(
          request,
          [&](const v1::ClusterProgress& p) {
            if (p.has_iteration()) {
              set_detail("k-means iteration " + std::to_string(p.iteration().iteration() + 1) +
                         "/" + std::to_string(niter) + ", objective " +
                         Fixed(p.iteration().objective(), 1));
            } else if (!p.note().empty()) {
              set_detail(p.note().rfind("k-means", 0) == 0 ? p.note() : "k-means: " + p.note());
            }
          },
          control.get());
      if (res.ok()) {
        result = *res;
      } else {
        status = res.status();
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  JobEntry* job = PhaseStillCurrent(job_id, generation);
  if (!job) return;
  if (!status.ok()) return PhaseError(job, what, status);
  v1::RoundStatus* live = job->job().mutable_rounds(r);
  *live = round;
  *live->mutable_cluster() = result;
  live->set_clustered(true);
  Transition(job, v1::JOB_STATE_ASSIGNING,
             RoundText(r, spec.training().rounds()) + ": clustered " +
                 std::to_string(result.num_points()) + " points into " +
                 std::to_string(result.k()) + " centres in " + Fixed(result.seconds(), 1) + " s");
}

void JobManager::RunAssigningPhase(std::string job_id, uint64_t generation, v1::JobRecord snapshot,
                                   std::shared_ptr<clusterd::CallControl> control) {
  const v1::JobSpec& spec = snapshot.job().spec();
  const int r = snapshot.job().rounds_size() - 1;
  const v1::RoundStatus& round = snapshot.job().rounds(r);
  const std::string label_set = "job/" + snapshot.job().id() + "/r" + std::to_string(r);
  v1::AssignRequest request;
  for (const auto& p : round.feature_paths()) request.mutable_features()->add_paths(p);
  request.set_centroids_path(round.centroids_path());
  request.set_l(spec.clustering().l());
  request.set_label_set(label_set);
  request.set_labelstore(options_.labelstore_address);
  const std::string& search = spec.clustering().search();
  request.set_method(search == "hnsw"  ? v1::SEARCH_METHOD_HNSW
                     : search == "ivf" ? v1::SEARCH_METHOD_IVF
                                       : v1::SEARCH_METHOD_EXACT);
  // An orphan of an earlier attempt (crash, failure) is replaced, never duplicated.
  request.set_replace_existing(true);
  if (!round.class_labels_path().empty()) request.set_class_labels_path(round.class_labels_path());
  (*request.mutable_metadata())["job"] = snapshot.job().id();
  (*request.mutable_metadata())["round"] = std::to_string(r);
  (*request.mutable_metadata())["centroids"] = round.centroids_path();
  request.set_request_id(label_set);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (JobEntry* job = PhaseStillCurrent(job_id, generation)) {
      job->job().mutable_progress()->set_detail("assigning the top-" +
                                                std::to_string(spec.clustering().l()) +
                                                " centres of every sample into " + label_set);
      Touch(job);
    }
  }
  clusterd::ClusterdClient client(options_.clusterd_address);
  auto result = client.Assign(
      request,
      [&](const v1::AssignProgress& p) {
        if (!p.has_status()) return;
        std::lock_guard<std::mutex> lock(mu_);
        if (JobEntry* job = PhaseStillCurrent(job_id, generation)) {
          job->job().mutable_progress()->set_detail(
              "assigning labels: " + std::to_string(p.status().rows_done()) + "/" +
              std::to_string(p.status().rows_total()) + " samples");
          Touch(job);
        }
      },
      control.get());
  std::lock_guard<std::mutex> lock(mu_);
  JobEntry* job = PhaseStillCurrent(job_id, generation);
  if (!job) return;
  if (!result.ok()) {
    return PhaseError(job, "assigning labels of " + RoundText(r, spec.training().rounds()),
                      result.status());
  }
  v1::RoundStatus* live = job->job().mutable_rounds(r);
  *live->mutable_assign() = *result;
  // The cluster record's size summary comes from this pass (CLUSTERING skipped its own).
  if (!live->cluster().has_sizes() && result->has_sizes())
    *live->mutable_cluster()->mutable_sizes() = result->sizes();
  live->set_label_set(result->label_set().empty() ? label_set : result->label_set());
  live->set_assigned(true);
  job->job().set_label_set(live->label_set());
  std::string quality;
  if (result->has_quality()) {
    quality = "; true class among top-1 / top-l clusters: " +
              Fixed(100 * result->quality().top1_recall(), 1) + "% / " +
              Fixed(100 * result->quality().topl_recall(), 1) + "%";
  }
  Transition(job, v1::JOB_STATE_TRAINING,
             RoundText(r, spec.training().rounds()) + ": " + std::to_string(result->num_samples()) +
                 " samples labelled in " + live->label_set() + quality);
}

}  // namespace mlcd::coordinator
