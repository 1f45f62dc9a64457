#include "worker/agent/assignment_paths.h"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdlib>

#include "common/confined_file.h"
#include "common/dataset/dataset_index.h"

namespace mlcd::worker {
namespace {

// `path` taken from the working directory when relative.
std::string FromWorkingDirectory(const std::string& path) {
  if (path[0] == '/') return path;
  char cwd[4096];
  const std::string here = ::getcwd(cwd, sizeof(cwd)) ? cwd : "/";
  return here + "/" + path;
}

class PathChecker {
 public:
  explicit PathChecker(const DataRoots& roots) : roots_(roots) {}

  void Check(const std::string& field, const std::string& path) {
    if (!status_.ok() || path.empty()) return;
    status_ = roots_.Confine(FromWorkingDirectory(path), field).status();
  }

  // The dataset's paths, then the files its indexes list.
  void Dataset(const std::string& prefix, const v1::DatasetSpec& d) {
    Check(prefix + ".path", d.path());
    for (int i = 0; i < d.paths_size(); ++i)
      Check(prefix + ".paths[" + std::to_string(i) + "]", d.paths(i));
    Check(prefix + ".index", d.index());
    Check(prefix + ".test_index", d.test_index());
    for (const std::string& dir : {d.index(), d.test_index()}) {
      if (!status_.ok() || dir.empty()) continue;
      // A missing or damaged index is the reader's error to report; only its files matter here.
      StatusOr<DatasetIndex> index = LoadDatasetIndex(dir, /*check_fingerprint=*/false, &roots_);
      if (index.status().code() == StatusCode::kPermissionDenied) status_ = index.status();
    }
  }

  const Status& status() const { return status_; }

 private:
  const DataRoots& roots_;
  Status status_;
};

}  // namespace

void AddWorkerDataRootFlag(CLI::App& cmd, WorkerRootFlags* flags, const std::string& default_text) {
  cmd.add_option("--data-root", flags->roots,
                 "Directory under which every path an assignment names must resolve (after "
                 "symlinks); repeatable. Default: the directories of $" +
                     std::string(kDataRootsEnv) + " (':'-separated), else " + default_text +
                     ". docs/hardening.md")
      ->take_all()
      ->allow_extra_args(false);
  AddPrivateDirFlag(cmd, &flags->private_dirs);
}

std::vector<std::string> DataRootsOrEnv(const std::vector<std::string>& given) {
  if (!given.empty()) return given;
  std::vector<std::string> out;
  const char* env = std::getenv(kDataRootsEnv);
  if (env == nullptr) return out;
  std::string list = env;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t colon = list.find(':', start);
    const std::string item =
        list.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!item.empty()) out.push_back(item);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

StatusOr<DataRoots> AgentDataRoots(const WorkerRootFlags& flags, const std::string& data_dir) {
  std::vector<std::string> private_dirs = flags.private_dirs;
  for (const std::string& dir : OwnStateDirs(data_dir)) private_dirs.push_back(dir);
  return DataRoots::FromFlags(DataRootsOrEnv(flags.roots), data_dir, private_dirs);
}

Status ConfineAssignmentPaths(const v1::Assignment& a, const DataRoots& roots) {
  PathChecker c(roots);
  c.Check("assignment.checkpoint_dir", a.checkpoint_dir());
  c.Check("assignment.resume_checkpoint", a.resume_checkpoint());
  c.Check("assignment.output_dir", a.output_dir());
  c.Check("assignment.centroids_path", a.centroids_path());
  c.Check("assignment.baseline_cache_dir", a.baseline_cache_dir());
  c.Check("assignment.tensorboard_dir", a.tensorboard_dir());
  for (int i = 0; i < a.feature_paths_size(); ++i)
    c.Check("assignment.feature_paths[" + std::to_string(i) + "]", a.feature_paths(i));
  for (int i = 0; i < a.feature_ids_paths_size(); ++i)
    c.Check("assignment.feature_ids_paths[" + std::to_string(i) + "]", a.feature_ids_paths(i));
  c.Check("assignment.class_labels_path", a.class_labels_path());
  c.Check("assignment.generated_features.dataset_path", a.generated_features().dataset_path());
  const v1::JobSpec& spec = a.spec();
  c.Check("spec.training.checkpoint_dir", spec.training().checkpoint_dir());
  c.Dataset("spec.dataset", spec.dataset());
  c.Dataset("spec.evaluation.dataset", spec.evaluation().dataset());
  const auto& features = spec.clustering().features();
  for (int i = 0; i < features.paths_size(); ++i)
    c.Check("spec.clustering.features.paths[" + std::to_string(i) + "]", features.paths(i));
  c.Check("spec.clustering.features.keys", features.keys());
  return c.status();
}

Status ConfineAssignmentForChild(const v1::Assignment& assignment, const WorkerRootFlags& flags) {
  const std::vector<std::string> given = DataRootsOrEnv(flags.roots);
  if (given.empty()) return Status::Ok();
  MLCD_ASSIGN_OR_RETURN(DataRoots roots, DataRoots::Make(given, flags.private_dirs));
  MLCD_RETURN_IF_ERROR(ConfineAssignmentPaths(assignment, roots));
  // From here on every dataset, index, npy, IDX and checkpoint file the child opens, and every
  // checkpoint and output it writes, is verified where it was opened (a link swapped in after
  // the check above is refused).
  InstallProcessDataRoots(roots);
  return Status::Ok();
}

}  // namespace mlcd::worker
