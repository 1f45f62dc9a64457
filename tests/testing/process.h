// Helpers for tests that run the real service binaries on loopback.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction unless
// MLCD_KEEP_TEST_DIRS is set.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Path of a built binary: MLCD_BIN_DIR/<name>.
std::string BinPath(const std::string& name);

// A child process whose stdout and stderr go to a log file. Killed with SIGKILL when the
// object is destroyed, and when the test process dies (PR_SET_PDEATHSIG).
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts `binary` with `args`, output appended to `log_path`, extra environment entries
  // ("NAME=value") added to the inherited environment.
  Status Start(const std::string& binary, const std::vector<std::string>& args,
               const std::string& log_path, const std::vector<std::string>& env = {});
  pid_t pid() const { return pid_; }
  bool running();
  // Sends `signal` (e.g. SIGKILL, SIGTERM).
  void Signal(int signal);
  // Waits for exit up to `timeout`; returns the wait status, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the wait status.
  int Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  // The log file's contents (for failure messages).
  std::string Log() const;
  const std::string& log_path() const { return log_path_; }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// Polls the standard gRPC health service at `address` until it answers SERVING for
// `service` ("" = the whole server) or `timeout` passes.
Status WaitForServing(const std::string& address, std::chrono::milliseconds timeout,
                      const std::string& service = "");

// Starts mlcd-labelstore on `address` (no metrics port) with its data in DIR/labelstore and
// its log in DIR/labelstore.log, `env` added to the environment, and waits until it serves.
Status StartLabelstore(ChildProcess* process, const std::string& address, const TempDir& dir,
                       const std::vector<std::string>& env);

// Runs a command to completion, capturing stdout+stderr. Returns the exit code (or -1).
int RunCommand(const std::string& binary, const std::vector<std::string>& args, std::string* output,
               const std::vector<std::string>& env = {},
               std::chrono::milliseconds timeout = std::chrono::seconds(300));

}  // namespace mlcd::testing
