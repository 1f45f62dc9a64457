// Confined paths on the worker (docs/hardening.md, "Data roots"): the worker agent
// and the children it runs read and write only under its data roots.
//
// The agent takes `--data-root DIR` (repeatable; else MLCD_DATA_ROOTS, ':'-separated; else its
// --data-dir and /usr/share/datasets when that exists) and `--private-dir DIR` (repeatable:
// folders no assignment path may name even under a root, such as the state of the services
// beside it; its own --data-dir/tls-private always is), resolves them once and passes them to
// every child as `--data-root` and `--private-dir` flags. A child given roots (flags, else
// MLCD_DATA_ROOTS) checks every path its assignment names before it touches any
// (ConfineAssignmentPaths): the checkpoint directory and resume checkpoint, the centroids,
// the output and baseline-cache directories, and the spec's dataset paths and indexes (and
// the files those indexes name). A path outside every root fails the child with the same
// PERMISSION_DENIED whether or not it exists (common/data_roots.h); the agent reports it, so
// the job fails with that reason. The roots then confine every open of the child
// (common/confined_file.h). A child run by hand without roots reads what its user names, as
// before.
#pragma once

#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/status.h"
#include "mlcd/v1/coordinator.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace mlcd::worker {

// The environment variable read when no --data-root is given (':'-separated directories).
inline constexpr const char* kDataRootsEnv = "MLCD_DATA_ROOTS";

// A worker command's path flags as given: --data-root and --private-dir.
struct WorkerRootFlags {
  std::vector<std::string> roots;
  std::vector<std::string> private_dirs;
};

// Adds `--data-root DIR` and `--private-dir DIR` (both repeatable) to a worker command.
void AddWorkerDataRootFlag(CLI::App& cmd, WorkerRootFlags* flags, const std::string& default_text);

// `given` when not empty, else the directories of MLCD_DATA_ROOTS (empty when unset).
std::vector<std::string> DataRootsOrEnv(const std::vector<std::string>& given);

// The agent's roots: DataRootsOrEnv(flags.roots), else DataRoots::FromFlags' default for
// `data_dir`; private: flags.private_dirs and `data_dir`'s own state (OwnStateDirs).
// INVALID_ARGUMENT naming a root that is not an existing directory or a private folder that
// cannot be resolved.
StatusOr<DataRoots> AgentDataRoots(const WorkerRootFlags& flags, const std::string& data_dir);

// Checks every path `assignment` names against `roots` (a relative one is taken from the
// working directory, as the child would open it): the first outside them is returned as
// PERMISSION_DENIED naming the field ("assignment.checkpoint_dir: '/x' is not under a data
// root of this service ..."). Indexes the spec names are loaded (without their fingerprint
// check) and the files they list checked too.
Status ConfineAssignmentPaths(const v1::Assignment& assignment, const DataRoots& roots);

// For a child command: OK when no roots are given (flags or environment); else the roots and
// private folders made (INVALID_ARGUMENT for a bad one) and ConfineAssignmentPaths, then, when
// that passed, installed as the process's roots (InstallProcessDataRoots,
// common/confined_file.h): every file the child then opens for its assignment (datasets,
// indexes, npy, IDX, checkpoints) and every checkpoint and output it writes is verified where
// it was opened, so a link swapped in after this check is refused, not followed.
Status ConfineAssignmentForChild(const v1::Assignment& assignment, const WorkerRootFlags& flags);

}  // namespace mlcd::worker
