#include "worker/train/checkpoint_retention.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "common/file_util.h"
#include "common/log.h"

namespace mlcd::worker {
namespace {

namespace fs = std::filesystem;

// The last component of a path ("a/b/" -> "b").
std::string NameOf(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) MLCD_LOG(WARNING) << "could not remove " << path << ": " << ec.message();
}

}  // namespace

bool ParseCheckpointPosition(const std::string& path_or_name, CheckpointPosition* position) {
  const std::string name = NameOf(path_or_name);
  int r = 0, e = 0;
  long long s = 0;
  char tail = 0;
  if (std::sscanf(name.c_str(), "ckpt-r%d-e%d-s%lld%c", &r, &e, &s, &tail) != 3) return false;
  // sscanf's %d also takes a sign and leading blanks: the name must be the one
  // CheckpointName writes.
  if (r < 0 || e < 0 || s < 0) return false;
  if ("ckpt-r" + std::to_string(r) + "-e" + std::to_string(e) + "-s" + std::to_string(s) != name)
    return false;
  position->round = r;
  position->epoch = e;
  position->step_in_epoch = s;
  return true;
}

std::vector<std::string> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<CheckpointPosition, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    CheckpointPosition position;
    if (entry.is_directory(ec) && ParseCheckpointPosition(entry.path().string(), &position) &&
        PathExists(entry.path().string() + "/meta.json")) {
      found.emplace_back(position, entry.path().string());
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

PrunePlan PlanPruning(const std::vector<std::string>& oldest_first, const std::string& just_written,
                      const CheckpointRetention& retention, bool coordinated,
                      const std::string& floor) {
  PrunePlan plan;
  if (retention.keep_last <= 0) return plan;
  CheckpointPosition floor_position;
  const bool have_floor = !floor.empty() && ParseCheckpointPosition(floor, &floor_position);
  // A coordinated run with nothing committed (or a floor it cannot place) keeps everything.
  if (coordinated && !have_floor) return plan;
  if (have_floor) plan.floor = NameOf(floor);
  const std::string written = NameOf(just_written);
  const std::string resumed =
      retention.resumed_from.empty() ? std::string() : NameOf(retention.resumed_from);
  const size_t n = oldest_first.size();
  const size_t keep = static_cast<size_t>(retention.keep_last);
  for (size_t i = 0; i < n; ++i) {
    const std::string name = NameOf(oldest_first[i]);
    CheckpointPosition position;
    const bool parsed = ParseCheckpointPosition(name, &position);
    const bool after_floor = have_floor && parsed && floor_position < position;
    const bool at_or_after_floor = after_floor || (have_floor && name == plan.floor);
    if (after_floor) ++plan.after_floor;
    if (i + keep >= n) continue;  // among the newest keep_last
    if (name == written || (!resumed.empty() && name == resumed)) continue;
    if (at_or_after_floor) continue;
    plan.remove.push_back(oldest_first[i]);
  }
  return plan;
}

StatusOr<std::string> ReadCommittedCheckpointFile(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    if (!PathExists(path)) return std::string();
    return text.status();
  }
  std::string line = text->substr(0, text->find('\n'));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

void PruneCheckpoints(const std::string& root, const std::string& just_written,
                      const CheckpointRetention& retention) {
  if (retention.keep_last <= 0) return;
  const bool coordinated = !retention.committed_file.empty();
  std::string floor;
  if (coordinated) {
    auto committed = ReadCommittedCheckpointFile(retention.committed_file);
    if (!committed.ok()) {
      MLCD_LOG(WARNING) << "cannot read the committed checkpoint (" << committed.status().ToString()
                        << "); pruning keeps what the run resumed from and everything after it";
    } else {
      floor = *committed;
    }
    if (floor.empty()) floor = retention.resumed_from;
    CheckpointPosition unused;
    if (!floor.empty() && !ParseCheckpointPosition(floor, &unused)) {
      MLCD_LOG(WARNING) << "the committed checkpoint '" << floor
                        << "' is not named ckpt-r<R>-e<E>-s<S>; pruning keeps every checkpoint";
    }
  }
  const std::vector<std::string> all = ListCheckpoints(root);
  const PrunePlan plan = PlanPruning(all, just_written, retention, coordinated, floor);
  for (const std::string& path : plan.remove) RemoveTree(path);
  const size_t keep = static_cast<size_t>(retention.keep_last);
  if (plan.after_floor > keep) {
    MLCD_LOG(WARNING) << plan.after_floor << " checkpoints after the coordinator's last commit ("
                      << plan.floor << ") are kept beyond --keep-checkpoints " << keep
                      << ": none of them is committed yet (the coordinator is slow or "
                         "unreachable); the first prune after a commit removes the older ones";
  } else if (coordinated && plan.floor.empty() && all.size() > keep) {
    MLCD_LOG(WARNING) << "all " << all.size() << " checkpoints of " << root
                      << " are kept beyond --keep-checkpoints " << keep
                      << ": the coordinator has committed none of this job's yet";
  }
}

}  // namespace mlcd::worker
