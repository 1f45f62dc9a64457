#include "common/checkpoint_owner.h"

#include "common/limits.h"

namespace mlcd {
namespace {

Status Claimed(const ConfinedDir& root, const std::string& owner, const std::string& job_id) {
  return Status::FailedPrecondition(
      "checkpoint root " + root.path() + " belongs to job " + owner + " (" +
      root.Join(kCheckpointOwnerFile) + "), not to " +
      (job_id.empty() ? std::string("this run by hand") : "job " + job_id) +
      ": a root holds the checkpoints of one job, so nothing here is written or pruned; "
      "give the job a checkpoint folder of its own");
}

}  // namespace

StatusOr<std::string> ReadCheckpointOwner(const ConfinedDir& root) {
  bool truncated = false;
  StatusOr<std::string> text =
      root.ReadFilePrefix(kCheckpointOwnerFile, kMaxCheckpointOwnerBytes, &truncated);
  if (text.status().code() == StatusCode::kNotFound) return std::string();
  if (!text.ok()) return text.status();
  std::string owner = *text;
  if (!owner.empty() && owner.back() == '\n') owner.pop_back();
  if (truncated || owner.empty() || owner.find('\n') != std::string::npos) {
    return Status::FailedPrecondition(root.Join(kCheckpointOwnerFile) +
                                      " is not an owner marker (one line: a job id)");
  }
  return owner;
}

Status ClaimCheckpointRoot(const ConfinedDir& root, const std::string& job_id) {
  if (!job_id.empty()) {
    Status created = root.CreateFileExclusively(kCheckpointOwnerFile, job_id + "\n");
    if (created.ok() || created.code() != StatusCode::kAlreadyExists) return created;
  }
  MLCD_ASSIGN_OR_RETURN(const std::string owner, ReadCheckpointOwner(root));
  if (owner.empty() || owner == job_id) return Status::Ok();
  return Claimed(root, owner, job_id);
}

}  // namespace mlcd
