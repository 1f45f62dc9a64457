// Which checkpoints of a root survive pruning (`--keep-checkpoints`; docs/hardening.md,
// "Checkpoints"). Torch-free: names, positions and directories only.
//
// A checkpoint's position is (round, epoch, step in epoch), parsed from its name
// "ckpt-r<R>-e<E>-s<S>" (worker/train/checkpoint.h); positions order the checkpoints of a job.
//
// The rule, applied by rank 0 right after it sealed a new checkpoint:
//   - the newest `keep_last` checkpoints stay (0 = all stay, nothing is pruned);
//   - the checkpoint just written and the one the run resumed from always stay;
//   - in a coordinated run (a child of the worker agent, which names the committed-checkpoint
//     file), the *floor* and every checkpoint after it stay: the floor is the checkpoint the
//     coordinator committed last, as the file names it; before the file exists (no heartbeat
//     answered yet), the checkpoint the run resumed from, which is the coordinator's last
//     commit when the assignment was made; with neither (a fresh job), every checkpoint stays.
//     A checkpoint after the floor may be in the middle of being committed (its heartbeat in
//     flight), so it is kept too. Only checkpoints before the floor and outside the newest
//     `keep_last` are removed.
// So the root holds more than `keep_last` checkpoints while the coordinator has not committed
// the newer ones (it is slow, unreachable, or the gang was aborted); Prune warns once more than
// `keep_last` checkpoints lie after the floor, and the next prune after a commit drops them.
//
// The committed-checkpoint file is written by the agent (worker/agent/agent.h: temp file,
// fsync, rename, whenever a heartbeat answer names a new commit) and read here at every prune. It holds one line: the
// checkpoint's path as the coordinator stores it; only its last component (the name) is used,
// so a gang whose rank 0 mounts the shared root elsewhere matches it too. A name that is not a
// checkpoint name keeps every checkpoint (and is logged).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"

namespace mlcd::worker {

struct CheckpointPosition {
  int round = 0;
  int epoch = 0;
  int64_t step_in_epoch = 0;

  bool operator<(const CheckpointPosition& o) const {
    return std::tie(round, epoch, step_in_epoch) < std::tie(o.round, o.epoch, o.step_in_epoch);
  }
};

// The position of `path_or_name` (a checkpoint directory's path or its name); false when its
// last component is not "ckpt-r<R>-e<E>-s<S>".
bool ParseCheckpointPosition(const std::string& path_or_name, CheckpointPosition* position);

// Checkpoint directories of a root (named as above, with meta.json), oldest first.
std::vector<std::string> ListCheckpoints(const std::string& root);

struct CheckpointRetention {
  // Keep the newest N checkpoints of the root (0 = keep all: nothing is pruned).
  int keep_last = 0;
  // The checkpoint this run resumed from (path; empty = a fresh start): never removed.
  std::string resumed_from;
  // The agent's committed-checkpoint file for this assignment (empty = a run by hand, which no
  // coordinator tracks: only keep_last and resumed_from apply).
  std::string committed_file;
};

// What one prune removes, and why the rest stays.
struct PrunePlan {
  std::vector<std::string> remove;
  // The floor's name ("" = none, or every checkpoint is kept because nothing is committed).
  std::string floor;
  // Checkpoints after the floor, all kept (the just-written one included).
  size_t after_floor = 0;
};

// The plan for `oldest_first` (ListCheckpoints) after writing `just_written` (a name or path),
// given the floor (a name or path; "" = no floor). `coordinated` with an empty floor keeps all.
PrunePlan PlanPruning(const std::vector<std::string>& oldest_first, const std::string& just_written,
                      const CheckpointRetention& retention, bool coordinated,
                      const std::string& floor);

// The committed checkpoint the file names (its first line): "" when the file does not exist yet
// or is empty. Any other read error is returned (the caller then keeps the fallback floor).
StatusOr<std::string> ReadCommittedCheckpointFile(const std::string& path);

// Rank 0, after sealing `just_written` under `root`: reads the committed file, plans and
// removes. Failures to remove are logged (the checkpoint stays); never fails the run.
void PruneCheckpoints(const std::string& root, const std::string& just_written,
                      const CheckpointRetention& retention);

}  // namespace mlcd::worker
