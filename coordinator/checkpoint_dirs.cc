#include "coordinator/checkpoint_dirs.h"

#include <filesystem>
#include <system_error>

#include "common/checkpoint_owner.h"
#include "common/confined_file.h"
#include "common/output_area_names.h"
#include "coordinator/job_entry.h"

namespace mlcd::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr const char* kField = "spec.training.checkpoint_dir";

// `path` lexically normalised without a trailing '/'; "" when a component is "..".
std::string Normal(const std::string& path) {
  for (const auto& part : fs::path(path)) {
    if (part == "..") return "";
  }
  std::string out = fs::path(path).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// The coordinator's data dir as the roots resolve paths (absolute, links resolved as far as it
// exists), so that it compares with a confined path.
std::string ResolvedDataDir(const std::string& data_dir) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(data_dir, ec);
  const fs::path resolved = fs::weakly_canonical(absolute, ec);
  return Normal(ec ? absolute.string() : resolved.string());
}

bool Overlap(const std::string& a, const std::string& b) {
  return !a.empty() && !b.empty() && (PathIsUnder(a, b) || PathIsUnder(b, a));
}

}  // namespace

std::string JobCheckpointDir(const std::string& data_dir, const std::string& job_id,
                             const v1::JobSpec& spec) {
  return spec.training().checkpoint_dir().empty() ? JobDir(data_dir, job_id) + "/ckpt"
                                                  : spec.training().checkpoint_dir();
}

StatusOr<std::string> CheckpointDirOwner(const v1::JobSpec& spec, const std::string& submitter,
                                         const std::string& data_dir, const DataRoots& roots) {
  const std::string& given = spec.training().checkpoint_dir();
  if (given.empty()) return std::string();
  MLCD_ASSIGN_OR_RETURN(const std::string resolved, roots.Confine(given, kField));
  const std::string area = OutputAreaOf(ResolvedDataDir(data_dir), submitter);
  if (!InsideArea(resolved, area)) {
    return Status::InvalidArgument(
        std::string(kField) + ": '" + given + "' is not in the output area of '" +
        (submitter.empty() ? "anonymous" : submitter) +
        "': a job's checkpoints go only into its own folder (leave checkpoint_dir empty: " +
        JobDir(data_dir, "<id>") + "/ckpt) or into a folder under " + area +
        "/ (the submitter's output area), so that no job replaces or prunes checkpoints of "
        "another user or job; name a folder there");
  }
  // The folder and those above it inside the area: a root nested in a claimed one would be
  // pruned away with the owner's checkpoints.
  for (fs::path dir = resolved; InsideArea(dir.string(), area); dir = dir.parent_path()) {
    StatusOr<ConfinedDir> opened = OpenConfinedDir(dir.string(), kField, /*create=*/false, &roots);
    if (opened.status().code() == StatusCode::kNotFound) continue;
    MLCD_RETURN_IF_ERROR(opened.status());
    MLCD_ASSIGN_OR_RETURN(const std::string owner, ReadCheckpointOwner(*opened));
    if (!owner.empty()) return owner;
  }
  return std::string();
}

Status CheckCheckpointDirUnshared(const v1::JobSpec& spec, const std::string& owner,
                                  const std::string& data_dir, const JobTable& jobs) {
  const std::string& given = spec.training().checkpoint_dir();
  if (given.empty()) return Status::Ok();
  auto refuse = [&](const std::string& job, const std::string& root) {
    return Status::FailedPrecondition(
        std::string(kField) + ": '" + given + "' is taken: job " + job + " keeps its checkpoints" +
        (root.empty() ? std::string(" there (its owner marker)") : " in " + root) +
        "; a checkpoint root belongs to one job, so that no job replaces or prunes another's "
        "checkpoints; name a new folder (or leave checkpoint_dir empty for the job's own)");
  };
  if (!owner.empty()) return refuse(owner, "");
  const std::string mine = Normal(given);
  for (const auto& [id, job] : jobs.all()) {
    const std::string theirs = JobCheckpointDir(data_dir, id, job->spec());
    if (Overlap(mine, Normal(theirs))) return refuse(id, theirs);
  }
  return Status::Ok();
}

std::string StageCheckpointDir(const std::string& root, int j) {
  return root + "/stage" + std::to_string(j);
}

bool CheckpointLiesIn(const std::string& reported, const std::string& dir) {
  const std::string r = Normal(reported);
  const std::string d = Normal(dir);
  return !r.empty() && !d.empty() && r != d && PathIsUnder(r, d);
}

}  // namespace mlcd::coordinator
