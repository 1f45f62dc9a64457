// Runs a check command's ranks as local processes: forks `world_size` copies of this
// executable (argv from `child_args(rank, rendezvous)`, the rendezvous a free loopback port)
// and waits for them. When a rank fails the others are stopped. Returns the exit code: 0 when
// every rank succeeded, 2 when the first failure exited with 2 (invalid input), 1 otherwise.
// Used by `mlcd-worker loss-check` and `mlcd-worker cluster-gang`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/loss/collectives.h"

namespace mlcd::worker {

using ChildArgsFn = std::function<std::vector<std::string>(int rank, const std::string& rendezvous)>;

int RunLocalRanks(const std::string& command, int world_size, const ChildArgsFn& child_args);

// The process group of one such rank: Collectives::Local() for world size 1, else a group at
// `rendezvous` under `store_prefix` with every collective bounded by `timeout_seconds`: NCCL
// when the ranks' tensors are on CUDA devices (`cuda`; one device per rank), Gloo otherwise.
StatusOr<std::unique_ptr<Collectives>> ConnectLocalRank(int rank, int world_size,
                                                        const std::string& rendezvous,
                                                        double timeout_seconds,
                                                        const std::string& store_prefix,
                                                        bool cuda = false);

}  // namespace mlcd::worker
