#include "worker/agent/stop_signal.h"

#include <signal.h>

namespace mlcd::worker {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
std::atomic<std::atomic<bool>*> g_also{nullptr};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs lock-free flags");

extern "C" void OnStopSignal(int) {
  g_stop.store(true);
  if (std::atomic<bool>* also = g_also.load()) also->store(true);
}

extern "C" void OnReloadSignal(int) { g_reload.store(true); }

}  // namespace

void InstallStopSignalHandler(std::atomic<bool>* also) {
  g_also.store(also);
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  struct sigaction reload = {};
  reload.sa_handler = OnReloadSignal;
  sigemptyset(&reload.sa_mask);
  reload.sa_flags = SA_RESTART;
  ::sigaction(SIGHUP, &reload, nullptr);
}

const std::atomic<bool>& StopSignal() { return g_stop; }

bool TakeReloadSignal() { return g_reload.exchange(false); }

}  // namespace mlcd::worker
