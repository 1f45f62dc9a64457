// The worker API of the JobManager (job_manager.h): registration, polls, heartbeats, reports
// and leaving. Every call is bound to the identity that registered the worker
// (CheckWorkerCaller, worker_registry.h): another identity gets PERMISSION_DENIED.
#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "coordinator/bad_samples_record.h"
#include "coordinator/caller_checks.h"
#include "coordinator/input_checks.h"
#include "coordinator/job_manager.h"

namespace mlcd::coordinator {

StatusOr<v1::RegisterWorkerResponse> JobManager::RegisterWorker(
    const v1::RegisterWorkerRequest& request, const std::string& caller) {
  MLCD_RETURN_IF_ERROR(CheckRegistration(request));
  MutexLock lock(&mu_);
  const auto now = Clock::now();
  if (!workers_.Find(request.name()) && workers_.size() >= kMaxWorkers) {
    return Status::ResourceExhausted("the coordinator has " + std::to_string(kMaxWorkers) +
                                     " registered worker slots, its limit");
  }
  WorkerEntry* old = workers_.Find(request.name());
  if (old) {
    MLCD_RETURN_IF_ERROR(CheckReRegistration(*old, caller, workers_.Alive(*old, now),
                                             workers_.Silent(*old, now), workers_.name_lease()));
  }
  // New work is refused below the disk's reserve, before anything changes.
  MLCD_RETURN_IF_ERROR(store_->CheckSpace("registering worker " + request.name()));
  if (old) {
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
  MLCD_RETURN_IF_ERROR(workers_.Register(request, caller, now).status());
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
                                                   const std::string& caller,
                                                   const std::function<bool()>& is_cancelled) {
  MLCD_RETURN_IF_ERROR(CheckPoll(request, options_.max_poll_seconds));
  MutexLock lock(&mu_);
  if (shutting_down_)
    return Status::Unavailable("the coordinator is shutting down; poll again once it is back");
  WorkerEntry* worker = workers_.Find(request.worker_id());
  if (!worker) {
    return Status::NotFound("unknown worker '" + request.worker_id() +
                            "'; register first (RegisterWorker)");
  }
  MLCD_RETURN_IF_ERROR(CheckWorkerCaller(*worker, caller));
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
                                                       MutexLock* lock) {
  ++worker->polls_waiting;
  tick_cv_.notify_all();
  while (!shutting_down_ && !worker->pending && !is_cancelled()) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    work_cv_.wait_until(lock->native(), std::min(deadline, now + std::chrono::milliseconds(500)));
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

namespace {

// HeartbeatResponse.committed_checkpoint for the members of `job`'s running gang: the
// checkpoint committed last in the attempt's round, else the one the attempt resumed from (the
// previous round's last commit); empty for EXTRACT and EVALUATE gangs, which prune nothing.
std::string CommittedCheckpoint(const JobEntry& job) {
  const v1::GangAttempt& attempt = job.rec.attempt();
  if (attempt.kind() != v1::ASSIGNMENT_KIND_TRAIN) return "";
  const int r = attempt.round();
  if (r >= 0 && r < job.rec.job().rounds_size() && !job.rec.job().rounds(r).checkpoint().empty())
    return job.rec.job().rounds(r).checkpoint();
  return attempt.resume_checkpoint();
}

}  // namespace

StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(const v1::HeartbeatRequest& request,
                                                      const std::string& caller) {
  MutexLock lock(&mu_);
  metrics_->Heartbeat();
  v1::HeartbeatResponse response;
  WorkerEntry* worker = workers_.Find(request.worker_id());
  if (!worker) {
    response.set_action(v1::WORKER_ACTION_REREGISTER);
    response.set_reason("unknown worker '" + request.worker_id() + "'; register again");
    return response;
  }
  MLCD_RETURN_IF_ERROR(CheckWorkerCaller(*worker, caller));
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
  RecordBadSamples(job, aid, request.progress());
  if (member->rank() == 0) progress_.OnRankZeroProgress(job, request.progress(), now);
  // After rank 0's progress, so the commit this very heartbeat made is in the answer.
  response.set_committed_checkpoint(CommittedCheckpoint(*job));
  if (worker->record.cordoned() && job->rec.attempt().kind() == v1::ASSIGNMENT_KIND_TRAIN) {
    response.set_action(v1::WORKER_ACTION_STOP);
    response.set_reason("worker " + worker->record.worker_id() + " is drained: checkpoint, stop");
  }
  return response;
}

StatusOr<v1::ReportAssignmentResponse> JobManager::ReportAssignment(
    const v1::ReportAssignmentRequest& request, const std::string& caller) {
  if (request.assignment_id().empty()) return Status::InvalidArgument("assignment_id: empty");
  MutexLock lock(&mu_);
  v1::ReportAssignmentResponse response;
  WorkerEntry* worker = workers_.Find(request.worker_id());
  const std::string& aid = request.assignment_id();
  if (worker) MLCD_RETURN_IF_ERROR(CheckWorkerCaller(*worker, caller));
  if (worker) {
    workers_.Seen(worker, Clock::now());
    if (worker->assignment_id == aid || worker->state == v1::WORKER_STATE_LOST)
      workers_.Release(worker);
    if (request.leaving()) worker->state = v1::WORKER_STATE_DRAINING;  // until it deregisters
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
  if (member && (!worker || member->worker_id() != worker->record.worker_id())) {
    return Status::PermissionDenied("assignment " + aid + " was given to worker " +
                                    member->worker_id() + ", not to '" + request.worker_id() +
                                    "'; only that worker may report it");
  }
  if (!member || member->reported()) return response;
  gangs_.Forget(job, aid);
  member->set_reported(true);
  member->set_succeeded(request.succeeded());
  for (const auto& path : request.output_paths()) member->add_output_paths(path);
  if (request.has_evaluation()) *member->mutable_evaluation() = request.evaluation();
  if (request.has_cluster()) *member->mutable_cluster() = request.cluster();
  if (request.has_assign()) *member->mutable_assign() = request.assign();
  RecordBadSamples(job, aid, request.progress());
  const int rank = member->rank();
  const std::string worker_id = member->worker_id();
  if (rank == 0) progress_.OnRankZeroProgress(job, request.progress(), Clock::now());
  MLCD_LOG(INFO) << "worker " << worker_id << " (rank " << rank << ") reported " << aid << ": "
                 << (request.succeeded() ? "succeeded" : "failed: " + request.message());
  if (!request.succeeded() && !request.preempted()) {
    AbortGang(
        job,
        "worker " + worker_id + " (rank " + std::to_string(rank) + ") failed: " + request.message(),
        true);
  } else {
    MemberDone(job, rank, request);
  }
  UpdateGauges();
  tick_cv_.notify_all();
  return response;
}

StatusOr<v1::ListWorkersResponse> JobManager::ListWorkers(const v1::ListWorkersRequest&) {
  MutexLock lock(&mu_);
  v1::ListWorkersResponse response;
  workers_.List(&response);
  return response;
}

// ---------------------------------------------------------------------------------------
// Workers leaving on purpose: a member that stopped at a checkpoint, an agent that
// deregisters, a worker an operator drains. None of them is a failure of the gang, so none
// spends one of the job's training.max_restarts.

void JobManager::MemberDone(JobEntry* job, int rank, const v1::ReportAssignmentRequest& request) {
  bool all_reported = true, all_succeeded = true;
  for (const auto& m : job->rec.attempt().members()) {
    all_reported = all_reported && m.reported();
    all_succeeded = all_succeeded && m.succeeded();
  }
  const std::string what = request.preempted() ? "stopped at a checkpoint" : "finished";
  if (!all_reported) {
    jobs_.Persist(job, {jobs_.NewHistory(
                           job, request.preempted() ? "member_stopped" : "member_finished",
                           "rank " + std::to_string(rank) + " " + what +
                               (request.preempted() ? ": " + request.message() : std::string()))});
    return;
  }
  if (all_succeeded) {
    FinishGang(job);
    return;
  }
  // Every member has reported and at least one stopped early: rank 0's report carried the
  // gang's last checkpoint (committed by the progress tracker), so the next gang resumes
  // there. A preemption is not the gang's fault: no restart is counted.
  const auto* round = job->round();
  const int64_t step = round ? round->checkpoint_global_step() : 0;
  AbortGang(job,
            "the gang stopped at the checkpoint of global step " + std::to_string(step) +
                " (rank " + std::to_string(rank) + ": " + request.message() +
                "); it is formed again from there",
            /*counts_as_restart=*/false);
}

StatusOr<v1::DeregisterWorkerResponse> JobManager::DeregisterWorker(
    const v1::DeregisterWorkerRequest& request, const std::string& caller) {
  if (request.worker_id().empty())
    return Status::InvalidArgument("worker_id: empty; give the id RegisterWorker returned");
  MutexLock lock(&mu_);
  WorkerEntry* worker = workers_.Find(request.worker_id());
  if (!worker) return v1::DeregisterWorkerResponse();
  MLCD_RETURN_IF_ERROR(CheckWorkerCaller(*worker, caller));
  const std::string reason = request.reason().empty() ? "stopped" : request.reason();
  if (!worker->assignment_id.empty()) {
    if (JobEntry* job = gangs_.JobOf(worker->assignment_id)) {
      AbortGang(job, "worker " + request.worker_id() + " left (" + reason + ")",
                /*counts_as_restart=*/false);
    }
  }
  MLCD_RETURN_IF_ERROR(workers_.Remove(request.worker_id()));
  MLCD_LOG(INFO) << "worker " << request.worker_id() << " left: " << reason;
  UpdateGauges();
  tick_cv_.notify_all();
  return v1::DeregisterWorkerResponse();
}

StatusOr<v1::DrainWorkerResponse> JobManager::DrainWorker(const v1::DrainWorkerRequest& request) {
  if (request.worker_id().empty())
    return Status::InvalidArgument("worker_id: empty; give a worker id (see `mlcdctl workers`)");
  MutexLock lock(&mu_);
  WorkerEntry* worker = workers_.Find(request.worker_id());
  if (!worker) {
    return Status::NotFound("worker '" + request.worker_id() +
                            "' is not registered; see `mlcdctl workers` for the ids");
  }
  MLCD_RETURN_IF_ERROR(workers_.SetCordoned(worker, !request.undo()));
  MLCD_LOG(INFO) << "worker " << request.worker_id()
                 << (request.undo() ? " uncordoned" : " drained: no new work")
                 << (worker->assignment_id.empty() || request.undo()
                         ? std::string()
                         : "; " + worker->assignment_id + " stops at its next checkpoint");
  tick_cv_.notify_all();
  v1::ListWorkersResponse all;
  workers_.List(&all);
  v1::DrainWorkerResponse response;
  for (const auto& w : all.workers()) {
    if (w.worker_id() == request.worker_id()) *response.mutable_worker() = w;
  }
  return response;
}

}  // namespace mlcd::coordinator
