// Workers leaving on purpose (JobManager, job_manager.h): a member that stopped at a
// checkpoint, an agent that deregisters, a worker an operator drains. None of them is a
// failure of the gang, so none spends one of the job's training.max_restarts.
#include "common/log.h"
#include "coordinator/caller_checks.h"
#include "coordinator/job_manager.h"

namespace mlcd::coordinator {

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
