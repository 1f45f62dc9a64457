// Running another program: the one fork/exec/wait facility of the project, for every process
// that starts children (the worker agent's training runs, mlcdctl's local cluster and its
// evaluation runs, loss-check ranks, the test and benchmark harnesses).
//
// Spawn() prepares everything the child needs (argv, the environment, the exec-failure
// message) before fork(), so that the child of a multi-threaded parent makes only
// async-signal-safe calls between fork and exec (setpgid, prctl, getppid, sigprocmask, signal,
// open, dup2, close, chdir, landlock_restrict_self, exec, write, _exit). When the exec fails the child writes
// "<exec_error_prefix>: <strerror(errno)>" to its (redirected) stderr and exits with
// kExecFailedExitCode, as a shell does for a command it cannot run.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd {

// The exit code of a child that could not exec its program (or whose parent died before it
// could, with parent_death_signal).
constexpr int kExecFailedExitCode = 127;

struct SpawnOptions {
  // The command line; argv[0] names the program: a path, or with search_path a name looked
  // up in $PATH as execvp does.
  std::vector<std::string> argv;
  // When non-empty, the file executed instead of argv[0] ("/proc/self/exe" starts this
  // executable again under the argv[0] given).
  std::string executable;
  bool search_path = false;

  // The child's environment: `env` when set (the complete list of "NAME=value" entries);
  // otherwise the parent's environment at the call, less the variables named in `unset_env`,
  // with the "NAME=value" entries of `set_env` added (an entry replaces a variable of the
  // same name; a later entry wins).
  std::optional<std::vector<std::string>> env;
  std::vector<std::string> unset_env;
  std::vector<std::string> set_env;

  // When non-empty, the child's stdout (if log_stdout) and stderr are appended to this file
  // (created with mode 0644); when it cannot be opened the child keeps the parent's.
  std::string log_path;
  bool log_stdout = true;
  // When >= 0, the child's stdout is this descriptor (e.g. the write end of a pipe), whatever
  // log_path says.
  int stdout_fd = -1;
  // Descriptors the child closes before the exec (e.g. both ends of that pipe; descriptors
  // 0, 1 and 2 are never closed).
  std::vector<int> close_fds;
  // The child's stdin reads /dev/null instead of the parent's stdin.
  bool stdin_from_dev_null = false;
  // The child's working directory ("" = the parent's); when chdir fails the child exits as
  // for a failed exec.
  std::string working_dir;

  // The child leads a new process group (its pid), so a signal to -pid reaches its own
  // children too. Set in the child and in the parent (no window where a kill misses it).
  bool new_process_group = false;
  // PR_SET_PDEATHSIG: the signal the child gets when the parent dies (0 = none). A child
  // whose parent died before the prctl exits with kExecFailedExitCode instead of running.
  int parent_death_signal = 0;
  // Unblocks every signal in the child (a parent may block SIGTERM/SIGINT to sigwait them).
  bool clear_signal_mask = false;
  // Restores SIGPIPE's default action in the child (a gRPC parent ignores it, and an ignored
  // signal stays ignored across exec).
  bool default_sigpipe = false;

  // When >= 0, a Landlock ruleset (common/withheld_files.h) the child restricts itself with
  // before the exec, after setting no_new_privs; a child that cannot exits with
  // kExecFailedExitCode, as for a failed exec. The parent keeps (and closes) the descriptor.
  int landlock_ruleset_fd = -1;

  // The first part of the message a failed exec writes; "" = "exec <file>".
  std::string exec_error_prefix;
};

// Starts the child and returns its pid. INVALID_ARGUMENT for an empty argv, INTERNAL when
// fork fails. A program that cannot be executed is not an error here: the child exits with
// kExecFailedExitCode.
StatusOr<pid_t> Spawn(const SpawnOptions& options);

// The wait status (as waitpid gives it) of child `pid` once it has exited, waiting as long as
// it takes; -1 when `pid` is not a child of this process.
int WaitForExit(pid_t pid);

// The wait status when child `pid` has exited (and is reaped now); nullopt while it runs, and
// also when `pid` is not a child of this process.
std::optional<int> TryWait(pid_t pid);

// TryWait every 20 ms until the child exits (its wait status) or `timeout` passes (nullopt).
std::optional<int> WaitForExitFor(pid_t pid, std::chrono::milliseconds timeout);

}  // namespace mlcd
