// Runs a check command's ranks as local processes: forks `world_size` copies of this
// executable (argv from `child_args(rank, rendezvous)`, the rendezvous a free loopback port)
// and waits for them. When a rank fails the others are stopped. Returns the exit code: 0 when
// every rank succeeded, 2 when the first failure exited with 2 (invalid input), 1 otherwise.
// Used by `mlcd-worker loss-check` and `mlcd-worker cluster-gang`.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace mlcd::worker {

using ChildArgsFn = std::function<std::vector<std::string>(int rank, const std::string& rendezvous)>;

int RunLocalRanks(const std::string& command, int world_size, const ChildArgsFn& child_args);

}  // namespace mlcd::worker
