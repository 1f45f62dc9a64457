#include "client/worker_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "common/subprocess.h"

namespace mlcd::cli {

std::string WorkerBinary(const std::string& override) {
  if (!override.empty()) return override;
  if (const char* env = std::getenv("MLCD_WORKER_BINARY")) return env;
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    std::string self(buf, static_cast<size_t>(n));
    std::string sibling = self.substr(0, self.rfind('/')) + "/mlcd-worker";
    if (::access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return "mlcd-worker";  // from PATH
}

Status WorkerErrorStatus(const std::string& message) {
  for (StatusCode c :
       {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kFailedPrecondition,
        StatusCode::kUnavailable, StatusCode::kDataLoss, StatusCode::kCancelled,
        StatusCode::kInternal, StatusCode::kResourceExhausted}) {
    const std::string prefix = std::string(StatusCodeName(c)) + ": ";
    if (message.rfind(prefix, 0) == 0) return Status(c, message.substr(prefix.size()));
  }
  return Status(StatusCode::kUnknown, message);
}

StatusOr<nlohmann::json> RunWorkerCommand(const WorkerRun& run) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return Status::Internal("pipe() failed");
  SpawnOptions spawn;
  spawn.argv = {run.binary, run.command, "--progress-jsonl", "-"};
  spawn.argv.insert(spawn.argv.end(), run.args.begin(), run.args.end());
  spawn.search_path = true;
  spawn.stdout_fd = pipe_fds[1];
  spawn.close_fds = {pipe_fds[0], pipe_fds[1]};
  spawn.stdin_from_dev_null = true;
  if (!run.log_path.empty()) {
    spawn.log_path = run.log_path;
    spawn.log_stdout = false;
  }
  spawn.exec_error_prefix = "cannot run " + run.binary;
  StatusOr<pid_t> spawned = Spawn(spawn);
  ::close(pipe_fds[1]);
  if (!spawned.ok()) {
    ::close(pipe_fds[0]);
    return spawned.status();
  }
  FILE* in = ::fdopen(pipe_fds[0], "r");
  nlohmann::json finished;
  std::string error;
  char* line = nullptr;
  size_t cap = 0;
  while (::getline(&line, &cap, in) > 0) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    const std::string event = j.value("event", "");
    if (event == "finished") {
      finished = j;
    } else if (event == "error") {
      error = j.value("message", "");
    } else if (run.on_event) {
      run.on_event(j);
    }
  }
  std::free(line);
  std::fclose(in);
  int wstatus = 0;
  ::waitpid(*spawned, &wstatus, 0);
  const bool exited = WIFEXITED(wstatus);
  if (exited && WEXITSTATUS(wstatus) == kExecFailedExitCode)
    return Status::NotFound("cannot run " + run.binary +
                            ": pass --worker-binary or set MLCD_WORKER_BINARY");
  if (finished.is_object() && exited && WEXITSTATUS(wstatus) == 0) return finished;
  const bool logged = !run.log_path.empty() && run.log_path != "/dev/null";
  std::string where = logged ? " (log: " + run.log_path + ")" : "";
  if (error.empty())
    return Status::Internal("mlcd-worker " + run.command + " exited without a result" + where);
  Status st = WorkerErrorStatus(error);
  return Status(st.code(), st.message() + where);
}

}  // namespace mlcd::cli
