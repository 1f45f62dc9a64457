// Runs a check command's ranks as local processes: forks `world_size` copies of this
// executable (argv from `child_args(rank, rendezvous)`, the rendezvous a free loopback port)
// and waits for them. When a rank fails the others are stopped. Returns the exit code: 0 when
// every rank succeeded, 2 when the first failure exited with 2 (invalid input), 1 otherwise.
// When rank 0 exits with kRendezvousPortTakenExitCode (another process took the port between
// its choice and rank 0's bind) the whole gang is stopped and started again on another port,
// up to kRendezvousAttempts times. A rank maps its Status to its exit code with
// LocalRankExitCode. Used by `mlcd-worker loss-check` and `mlcd-worker cluster-gang`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker {

// The exit code of a rank whose rendezvous port was taken (ALREADY_EXISTS from the store).
inline constexpr int kRendezvousPortTakenExitCode = 3;
// How many ports RunLocalRanks tries before it gives up.
inline constexpr int kRendezvousAttempts = 5;

// A rank's exit code for its result: 0 ok, 2 INVALID_ARGUMENT, kRendezvousPortTakenExitCode
// when IsRendezvousPortTaken, 1 otherwise.
int LocalRankExitCode(const Status& status);
// The end of a rank's command: prints "<who>: <status>" to stderr when it failed, and returns
// LocalRankExitCode(status).
int FinishLocalRank(const std::string& who, const Status& status);

using ChildArgsFn =
    std::function<std::vector<std::string>(int rank, const std::string& rendezvous)>;

int RunLocalRanks(const std::string& command, int world_size, const ChildArgsFn& child_args);

// The process group of one such rank: Collectives::Local() for world size 1, else a group at
// `rendezvous` under `store_prefix` with every collective bounded by `timeout_seconds`, moving
// tensors of `device` (NCCL on a CUDA device, one per rank; Gloo on the CPU).
StatusOr<std::unique_ptr<Collectives>> ConnectLocalRank(
    int rank, int world_size, const std::string& rendezvous, double timeout_seconds,
    const std::string& store_prefix, c10::Device device = c10::Device(c10::kCPU));

}  // namespace mlcd::worker
