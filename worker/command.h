// Subcommands of the mlcd-worker executable (train, loss-check, agent, embed, ...), registered
// in the executables' one command registry (common/command.h) with the exit code as their
// argument. Each command file registers itself; main.cc only parses and dispatches:
//   static mlcd::worker::CommandRegistration reg(20, [](CLI::App& app, int* exit_code) {
//     auto* cmd = app.add_subcommand("loss-check", "...");
//     cmd->callback([exit_code] { *exit_code = RunLossCheck(...); });
//   });
// Command files are compiled into the executable itself (worker/CMakeLists.txt globs
// *_command.cc), so their static registrations are always linked.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "common/command.h"

namespace mlcd::worker {

using CommandRegistrar = ::mlcd::CommandRegistrar<int*>;
using CommandRegistration = ::mlcd::CommandRegistration<int*>;

inline void AddRegisteredCommands(CLI::App& app, int* exit_code) {
  ::mlcd::AddRegisteredCommands<int*>(app, exit_code);
}

// The options of a command whose ranks run as local processes (worker/dist/local_ranks.h):
// the collective timeout, and the hidden --rank and --rendezvous the parent passes its
// children.
inline void AddLocalRankOptions(CLI::App* cmd, double* timeout_seconds, int* rank,
                                std::string* rendezvous) {
  cmd->add_option("--timeout", *timeout_seconds, "collective timeout in seconds")
      ->capture_default_str();
  cmd->add_option("--rank", *rank, "internal: rank of a child process")->group("");
  cmd->add_option("--rendezvous", *rendezvous, "internal: HOST:PORT of rank 0's store")->group("");
}

}  // namespace mlcd::worker
