#include "worker/dist/local_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>

#include "common/net.h"
#include "common/subprocess.h"

namespace mlcd::worker {

namespace {

// One start of the gang on `port`. Returns the exit code as RunLocalRanks does, or
// kRendezvousPortTakenExitCode when rank 0 failed first with it.
int RunGangOnce(const std::string& command, int world_size, int port,
                const ChildArgsFn& child_args) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(port);
  std::vector<pid_t> children;
  for (int r = 0; r < world_size; ++r) {
    SpawnOptions spawn;
    spawn.argv = child_args(r, rendezvous);
    spawn.executable = "/proc/self/exe";
    spawn.exec_error_prefix = command + ": exec of a rank failed";
    StatusOr<pid_t> pid = Spawn(spawn);
    if (!pid.ok()) {
      std::cerr << command << ": " << pid.status().message() << "\n";
      for (pid_t c : children) ::kill(c, SIGTERM);
      for (pid_t c : children) WaitForExit(c);
      return 1;
    }
    children.push_back(*pid);
  }
  int exit_code = 0;
  size_t remaining = children.size();
  while (remaining > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) break;
    size_t idx = 0;
    while (idx < children.size() && children[idx] != pid) ++idx;
    if (idx == children.size()) continue;
    children[idx] = -1;
    --remaining;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (code != 0) {
      if (exit_code == 0) {
        if (idx == 0 && code == kRendezvousPortTakenExitCode) {
          exit_code = code;
        } else {
          std::cerr << command << ": rank " << idx << " of " << world_size << " failed ("
                    << (WIFEXITED(status) ? "exit code " + std::to_string(code)
                                          : "signal " + std::to_string(WTERMSIG(status)))
                    << "); stopping the other ranks\n";
          exit_code = code == 2 ? 2 : 1;
        }
      }
      for (pid_t c : children) {
        if (c > 0) ::kill(c, SIGTERM);
      }
    }
  }
  return exit_code;
}

}  // namespace

int FinishLocalRank(const std::string& who, const Status& status) {
  if (!status.ok()) std::cerr << who << ": " << status.ToString() << "\n";
  return LocalRankExitCode(status);
}

int LocalRankExitCode(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalidArgument:
      return 2;
    default:
      return IsRendezvousPortTaken(status) ? kRendezvousPortTakenExitCode : 1;
  }
}

int RunLocalRanks(const std::string& command, int world_size, const ChildArgsFn& child_args) {
  int port = 0;
  for (int attempt = 1; attempt <= kRendezvousAttempts; ++attempt) {
    port = PickFreePort();
    if (port == 0) {
      std::cerr << command << ": could not find a free loopback port for the rendezvous\n";
      return 1;
    }
    int code = RunGangOnce(command, world_size, port, child_args);
    if (code != kRendezvousPortTakenExitCode) return code;
    std::cerr << command << ": another process took rendezvous port " << port
              << " before rank 0 could serve it; starting the ranks again on another port\n";
  }
  std::cerr << command << ": the rendezvous port was taken " << kRendezvousAttempts
            << " times in a row (last " << port << "); free some loopback ports and retry\n";
  return 1;
}

StatusOr<std::unique_ptr<Collectives>> ConnectLocalRank(int rank, int world_size,
                                                        const std::string& rendezvous,
                                                        double timeout_seconds,
                                                        const std::string& store_prefix,
                                                        c10::Device device) {
  if (world_size == 1) return Collectives::Local(device);
  CollectivesOptions co;
  co.rank = rank;
  co.world_size = world_size;
  co.rendezvous = rendezvous;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  co.store_prefix = store_prefix;
  co.device = device;
  return Collectives::Create(co);
}

}  // namespace mlcd::worker
