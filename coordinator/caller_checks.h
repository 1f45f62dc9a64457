// Who may act on what, beyond the role table (common/access_policy.h): a job's submitter and
// a worker's registering identity (docs/security.md, "Bindings"). Identities are
// Principal::identity strings (common/security.h); "" when the coordinator checks no one.
//
// Jobs: a submitter reaches only the jobs it submitted (GetJob, ListJobs, WatchJob,
// CancelJob); viewers read every job, admins read and cancel every job. Another user's job
// is answered NOT_FOUND with the words of a job that does not exist, so a submitter learns
// nothing of it, not even that its id is taken.
#pragma once

#include <string>

#include "common/status.h"
#include "coordinator/job_entry.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// The jobs a call reaches: those `identity` submitted, or every job with `any_job`.
struct JobScope {
  std::string identity;
  bool any_job = true;
  bool Covers(const v1::Job& job) const { return any_job || job.submitted_by() == identity; }
};

// OK when `job` exists (not null) and `scope` covers it; NOT_FOUND for job id `id` otherwise,
// the same words for a missing job and another user's.
Status CheckJobInScope(const v1::Job* job, const std::string& id, const JobScope& scope);

// OK when `caller` is the identity that registered `worker`; PERMISSION_DENIED otherwise.
Status CheckWorkerCaller(const WorkerEntry& worker, const std::string& caller);

// Re-registration of `worker`'s name by `caller`: another identity may take over the name
// only when the worker is no longer alive (`alive` false: LOST or silent past the idle timeout).
Status CheckReRegistration(const WorkerEntry& worker, const std::string& caller, bool alive);

}  // namespace mlcd::coordinator
