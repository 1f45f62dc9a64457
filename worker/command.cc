#include "worker/command.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace mlcd::worker {
namespace {

std::vector<std::pair<int, CommandRegistrar>>& Registry() {
  static auto* registry = new std::vector<std::pair<int, CommandRegistrar>>();
  return *registry;
}

}  // namespace

CommandRegistration::CommandRegistration(int order, CommandRegistrar registrar) {
  Registry().emplace_back(order, std::move(registrar));
}

void AddRegisteredCommands(CLI::App& app, int* exit_code) {
  auto& registry = Registry();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& entry : registry) entry.second(app, exit_code);
}

}  // namespace mlcd::worker
