// Stopping a worker process at a checkpoint on SIGTERM/SIGINT (docs/worker.md, "Stopping").
//
// The contract between `mlcd-worker agent` and its `train` child:
//   - the agent forwards SIGTERM to the child and waits up to its stop deadline
//     (--stop-deadline-seconds, MLCD_STOP_DEADLINE_SECONDS) before SIGKILL;
//   - the child finishes the step it is in, agrees with its gang on the step to stop at
//     (every rank stops there, signalled or not), writes a checkpoint there, emits a
//     "stopped" progress event and exits with kExitStoppedAtCheckpoint;
//   - the agent reports the assignment as preempted (ReportAssignmentRequest.preempted), and
//     the coordinator forms the gang again from that checkpoint without counting a restart.
//
// The handler is a plain sigaction handler that only sets an atomic flag, so the signal is
// caught whichever thread it lands on (libraries such as OpenBLAS start threads before main()
// that never block it).
#pragma once

#include <atomic>
#include <chrono>

namespace mlcd::worker {

// Exit status of a `train` child that stopped at a checkpoint on request (EX_TEMPFAIL).
constexpr int kExitStoppedAtCheckpoint = 75;
// Default stop deadline: Kubernetes' default grace period (30 s) would be too short for a
// checkpoint of a large model; the manifests set terminationGracePeriodSeconds to 120 and
// MLCD_STOP_DEADLINE_SECONDS to 100. Outside Kubernetes this is the agent's own patience.
constexpr int kDefaultStopDeadlineSeconds = 50;
// Time the agent keeps for itself after the child's deadline (report, deregister).
constexpr std::chrono::seconds kAgentStopMargin{5};

// Installs the SIGTERM/SIGINT handler (once; idempotent). After it, StopSignal() turns true
// when either arrives; `also` (may be null) is set too. SIGHUP only raises the flag
// TakeReloadSignal() reads (the agent then reloads its certificates and tokens). Async-signal-
// safe by construction.
void InstallStopSignalHandler(std::atomic<bool>* also = nullptr);
// The flag the handler sets.
const std::atomic<bool>& StopSignal();
// True once per SIGHUP received since the last call.
bool TakeReloadSignal();

}  // namespace mlcd::worker
