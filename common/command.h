// The command registry of the MLCD executables (mlcdctl, mlcd-worker): each command file
// registers a function that adds its subcommands to the CLI11 app; main() runs them all and
// dispatches. One registry per argument type `Arg`, the state a binary hands its commands
// (mlcdctl: its Context&, client/cli.h; mlcd-worker: the exit code, int*, worker/command.h).
//
//   static mlcd::CommandRegistration<int*> reg(20, [](CLI::App& app, int* exit_code) {
//     auto* cmd = app.add_subcommand("loss-check", "...");
//     cmd->callback([exit_code] { *exit_code = RunLossCheck(...); });
//   });
//   ...
//   mlcd::AddRegisteredCommands<int*>(app, &exit_code);  // in main(), before app.parse()
//
// Command files are compiled into the executable itself (not a static library), so their
// static registrations are always linked. Registrations run before main() and are not
// thread-safe; AddRegisteredCommands runs them in ascending `order` (stable for equal orders),
// which is the order of the commands in --help.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

namespace mlcd {

template <typename Arg>
using CommandRegistrar = std::function<void(CLI::App& app, Arg arg)>;

namespace command_internal {

template <typename Arg>
std::vector<std::pair<int, CommandRegistrar<Arg>>>& Registry() {
  static auto* registry = new std::vector<std::pair<int, CommandRegistrar<Arg>>>();
  return *registry;
}

}  // namespace command_internal

// Registers `registrar`; `order` sorts the commands in --help.
template <typename Arg>
struct CommandRegistration {
  CommandRegistration(int order, CommandRegistrar<Arg> registrar) {
    command_internal::Registry<Arg>().emplace_back(order, std::move(registrar));
  }
};

// Runs every registration for `Arg` (sorted by order) against `app`.
template <typename Arg>
void AddRegisteredCommands(CLI::App& app, Arg arg) {
  auto& registry = command_internal::Registry<Arg>();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& entry : registry) entry.second(app, arg);
}

}  // namespace mlcd
