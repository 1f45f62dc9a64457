#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace mlcd {
namespace {

// The name of a "NAME=value" entry.
std::string EntryName(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// The child's environment as SpawnOptions describes it, when it differs from the parent's.
std::optional<std::vector<std::string>> ChildEnvironment(const SpawnOptions& o) {
  if (o.env) return o.env;
  if (o.unset_env.empty() && o.set_env.empty()) return std::nullopt;
  auto dropped = [&](const std::string& name) {
    for (const auto& u : o.unset_env) {
      if (u == name) return true;
    }
    for (const auto& s : o.set_env) {
      if (EntryName(s) == name) return true;
    }
    return false;
  };
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (!dropped(EntryName(entry))) env.push_back(entry);
  }
  for (size_t i = 0; i < o.set_env.size(); ++i) {
    bool replaced_later = false;
    for (size_t j = i + 1; j < o.set_env.size(); ++j) {
      replaced_later = replaced_later || EntryName(o.set_env[j]) == EntryName(o.set_env[i]);
    }
    if (!replaced_later) env.push_back(o.set_env[i]);
  }
  return env;
}

std::vector<char*> Pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void WriteAll(int fd, const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

// Everything the child uses, prepared before fork.
struct ChildPlan {
  const SpawnOptions* options;
  const char* file;
  std::vector<char*> argv;
  std::optional<std::vector<std::string>> env;
  std::vector<char*> envp;  // empty = inherit
  std::string exec_error;
  pid_t parent;
};

// Runs in the child between fork and exec: async-signal-safe calls only. Never returns.
[[noreturn]] void RunChild(const ChildPlan& plan) {
  const SpawnOptions& o = *plan.options;
  if (o.new_process_group) ::setpgid(0, 0);
  if (o.parent_death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, o.parent_death_signal);
    if (::getppid() != plan.parent) ::_exit(kExecFailedExitCode);
  }
  if (o.clear_signal_mask) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }
  if (o.default_sigpipe) ::signal(SIGPIPE, SIG_DFL);
  if (!o.log_path.empty()) {
    const int fd = ::open(o.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      if (o.log_stdout) ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
  }
  if (o.stdout_fd >= 0) ::dup2(o.stdout_fd, 1);
  for (int fd : o.close_fds) {
    if (fd > 2) ::close(fd);
  }
  if (o.stdin_from_dev_null) {
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::close(devnull);
    }
  }
  if (o.landlock_ruleset_fd >= 0) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::syscall(SYS_landlock_restrict_self, o.landlock_ruleset_fd, 0) != 0) {
      const char* reason = std::strerror(errno);
      WriteAll(2, "cannot restrict the child with its Landlock ruleset: ");
      WriteAll(2, reason);
      WriteAll(2, "\n");
      ::_exit(kExecFailedExitCode);
    }
    ::close(o.landlock_ruleset_fd);
  }
  if (o.working_dir.empty() || ::chdir(o.working_dir.c_str()) == 0) {
    char* const* argv = plan.argv.data();
    if (plan.envp.empty()) {
      o.search_path ? ::execvp(plan.file, argv) : ::execv(plan.file, argv);
    } else {
      char* const* envp = plan.envp.data();
      o.search_path ? ::execvpe(plan.file, argv, envp) : ::execve(plan.file, argv, envp);
    }
  }
  const char* reason = std::strerror(errno);
  WriteAll(2, plan.exec_error.c_str());
  WriteAll(2, reason);
  WriteAll(2, "\n");
  ::_exit(kExecFailedExitCode);
}

}  // namespace

StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return Status::InvalidArgument("spawn: empty command line");
  ChildPlan plan;
  plan.options = &options;
  plan.file = options.executable.empty() ? options.argv[0].c_str() : options.executable.c_str();
  plan.argv = Pointers(options.argv);
  plan.env = ChildEnvironment(options);
  if (plan.env) plan.envp = Pointers(*plan.env);
  plan.exec_error = (options.exec_error_prefix.empty() ? std::string("exec ") + plan.file
                                                       : options.exec_error_prefix) +
                    ": ";
  plan.parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) RunChild(plan);
  if (options.new_process_group) ::setpgid(pid, pid);
  return pid;
}

int WaitForExit(pid_t pid) {
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
  }
}

std::optional<int> TryWait(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) return status;
  return std::nullopt;
}

std::optional<int> WaitForExitFor(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto status = TryWait(pid)) return status;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace mlcd
