// mlcdctl's commands that need tensors (eval, export) run `mlcd-worker <command>` on this
// machine as a child process: mlcdctl itself has no tensor code. This file finds the worker
// executable and runs one command, reading its progress events (JSON lines on its stdout,
// worker/command_io.h).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::cli {

// The mlcd-worker executable: `override` when set, else $MLCD_WORKER_BINARY, else the one next
// to this executable, else "mlcd-worker" from $PATH.
std::string WorkerBinary(const std::string& override);

// The status of a worker's "error" event: its message starts with its status code's name
// ("NOT_FOUND: ..."); UNKNOWN when it does not.
Status WorkerErrorStatus(const std::string& message);

struct WorkerRun {
  std::string binary;             // from WorkerBinary()
  std::string command;            // "export", "eval", ...
  std::vector<std::string> args;  // after `<command> --progress-jsonl -`
  // The worker's log (stderr) is appended here; empty = our stderr.
  std::string log_path;
  // Called with every event but the last "finished" / "error" one (progress display).
  std::function<void(const nlohmann::json&)> on_event;
};

// Runs the command and returns its "finished" event. Errors: the worker's "error" event as a
// status (WorkerErrorStatus, plus where its log is); NOT_FOUND when the binary cannot be run.
StatusOr<nlohmann::json> RunWorkerCommand(const WorkerRun& run);

}  // namespace mlcd::cli
