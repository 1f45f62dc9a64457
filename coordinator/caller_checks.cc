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

Status CheckWorkerCaller(const WorkerEntry& worker, const std::string& caller) {
  if (worker.record.identity() == caller) return Status::Ok();
  return Status::PermissionDenied("worker '" + worker.record.worker_id() + "' is registered by " +
                                  Who(worker.record.identity()) + "; " + Who(caller) +
                                  " may not act for it");
}

Status CheckReRegistration(const WorkerEntry& worker, const std::string& caller, bool alive) {
  if (!alive || worker.record.identity() == caller) return Status::Ok();
  return Status::PermissionDenied(
      "worker name '" + worker.record.worker_id() + "' is registered by " +
      Who(worker.record.identity()) + " and alive; " + Who(caller) +
      " may not take it over (pick another --name, or wait until it is marked lost)");
}

}  // namespace mlcd::coordinator
