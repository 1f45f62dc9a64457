// Subcommands of the mlcd-worker executable (train, loss-check, agent, embed, ...). Each
// command file registers itself; main.cc only parses and dispatches:
//   static mlcd::worker::CommandRegistration reg(20, [](CLI::App& app, int* exit_code) {
//     auto* cmd = app.add_subcommand("loss-check", "...");
//     cmd->callback([exit_code] { *exit_code = RunLossCheck(...); });
//   });
// Command files are compiled into the executable itself (worker/CMakeLists.txt globs
// *_command.cc), so their static registrations are always linked.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace mlcd::worker {

using CommandRegistrar = std::function<void(CLI::App& app, int* exit_code)>;

struct CommandRegistration {
  CommandRegistration(int order, CommandRegistrar registrar);
};

void AddRegisteredCommands(CLI::App& app, int* exit_code);

}  // namespace mlcd::worker
