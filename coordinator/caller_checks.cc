#include "coordinator/caller_checks.h"

namespace mlcd::coordinator {
namespace {

std::string Who(const std::string& identity) {
  return identity.empty() ? "an unidentified caller" : "'" + identity + "'";
}

}  // namespace

Status CheckJobInScope(const v1::Job* job, const std::string& id, const JobScope& scope) {
  if (job && scope.Covers(*job)) return Status::Ok();
  if (scope.any_job) return Status::NotFound("job '" + id + "' does not exist");
  return Status::NotFound("job '" + id + "' is not among the jobs of " + Who(scope.identity) +
                          " (a submitter token reaches only the jobs it submitted; see "
                          "`mlcdctl list`)");
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
