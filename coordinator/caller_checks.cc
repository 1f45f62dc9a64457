#include "coordinator/caller_checks.h"

namespace mlcd::coordinator {
namespace {

std::string Who(const std::string& identity) {
  return identity.empty() ? "an unidentified caller" : "'" + identity + "'";
}

}  // namespace

Status CheckCancelAllowed(const v1::Job& job, const std::string& caller, bool any_job) {
  if (any_job || job.submitted_by() == caller) return Status::Ok();
  return Status::PermissionDenied("job " + job.id() + " was submitted by " +
                                  Who(job.submitted_by()) + "; " + Who(caller) +
                                  " may cancel only its own jobs (an admin token cancels any)");
}

bool HidesRequestId(const v1::Job& job, const std::string& caller, bool any_job) {
  return !any_job && job.submitted_by() != caller && !job.request_id().empty();
}

void HideOthersRequestId(const std::string& caller, bool any_job, v1::Job* job) {
  if (!HidesRequestId(*job, caller, any_job)) return;
  job->clear_request_id();
  for (auto& entry : *job->mutable_history()) {
    if (entry.kind() == "submitted") entry.set_message("submitted");
  }
}

Status CheckGivenLabelSetOwner(const std::string& name, const std::string& owner,
                               const std::string& caller, bool any_set,
                               const std::string* owner_job_submitter) {
  if (any_set || caller.empty() || owner == caller) return Status::Ok();
  if (owner_job_submitter && *owner_job_submitter == caller) return Status::Ok();
  return Status::PermissionDenied(
      "spec.clustering.label_set: label set '" + name + "' is owned by " +
      (owner.empty() ? std::string("no one recorded") : "'" + owner + "'") + "; " + Who(caller) +
      " may train only on its own label sets or those of its own jobs, which no one else can "
      "delete under the job; import a copy under your own identity (`mlcdctl labels import`), "
      "or ask an admin to submit the job");
}

Status CheckWorkerCaller(const WorkerEntry& worker, const std::string& caller) {
  if (worker.record.identity() == caller) return Status::Ok();
  return Status::PermissionDenied("worker '" + worker.record.worker_id() + "' is registered by " +
                                  Who(worker.record.identity()) + "; " + Who(caller) +
                                  " may not act for it");
}

Status CheckReRegistration(const WorkerEntry& worker, const std::string& caller, bool alive,
                           std::chrono::milliseconds silent, std::chrono::milliseconds lease) {
  if (worker.record.identity() == caller) return Status::Ok();
  if (alive) {
    return Status::PermissionDenied(
        "worker name '" + worker.record.worker_id() + "' is registered by " +
        Who(worker.record.identity()) + " and alive; " + Who(caller) +
        " may not take it over (pick another --name, or wait until it is marked lost)");
  }
  if (silent < lease) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(lease - silent).count() + 1;
    return Status::PermissionDenied(
        "worker name '" + worker.record.worker_id() + "' stays bound to " +
        Who(worker.record.identity()) + ", which registered it, for " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(lease).count()) +
        " s after it was last heard from (--worker-name-lease-seconds); " + Who(caller) +
        " may take it over in " + std::to_string(left) + " s, or pick another --name");
  }
  return Status::Ok();
}

}  // namespace mlcd::coordinator
