// Who may act on what, beyond the role table (common/access_policy.h): a job's submitter and
// a worker's registering identity (docs/security.md, "Bindings"). Identities are
// Principal::identity strings (common/security.h); "" when the coordinator checks no one.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"
#include "coordinator/job_entry.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// OK when `caller` submitted `job` or `any_job` (admin); PERMISSION_DENIED otherwise.
Status CheckCancelAllowed(const v1::Job& job, const std::string& caller, bool any_job);

// Request ids belong to the identity that sent them (docs/security.md, "Bindings"): true when
// `job` has one and `caller` neither submitted the job nor may read any (`any_job`: admin).
bool HidesRequestId(const v1::Job& job, const std::string& caller, bool any_job);
// `job` as `caller` may read it: when HidesRequestId, the request id cleared, from
// Job.request_id and from the "submitted" history entry that names it.
void HideOthersRequestId(const std::string& caller, bool any_job, v1::Job* job);

// May `caller` submit a job that trains on the label set `name`, owned by `owner`
// (clustering.label_set; LabelSetInfo.owner)? The job depends on the set for its whole run,
// and only the set's owner (or an admin) may delete it, so a job trains only on a set its
// submitter controls: one it owns, or one of a job it submitted (owner "job:<id>", with
// `owner_job_submitter` that job's submitted_by; null when the coordinator knows no such
// job). Always OK for an admin (`any_set`) and when the coordinator checks no callers
// (`caller` ""). PERMISSION_DENIED otherwise, naming the set, its owner and the fix.
Status CheckGivenLabelSetOwner(const std::string& name, const std::string& owner,
                               const std::string& caller, bool any_set,
                               const std::string* owner_job_submitter);

// OK when `caller` is the identity that registered `worker`; PERMISSION_DENIED otherwise.
Status CheckWorkerCaller(const WorkerEntry& worker, const std::string& caller);

// Re-registration of `worker`'s name by `caller`. The identity that registered it may always
// come back; another identity may take over the name only when the worker is no longer alive
// (`alive` false: LOST or silent past the idle timeout) AND its name lease has ended: it has
// been silent for `silent` >= `lease` (--worker-name-lease-seconds). PERMISSION_DENIED
// otherwise, saying how long the lease still holds.
Status CheckReRegistration(const WorkerEntry& worker, const std::string& caller, bool alive,
                           std::chrono::milliseconds silent, std::chrono::milliseconds lease);

}  // namespace mlcd::coordinator
