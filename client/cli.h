// The frame of mlcdctl: global flags, the command registry every command file adds to
// (common/command.h, with the Context below as the commands' argument), exit codes, output
// helpers and a progress display.
//
// A command file (e.g. labels_commands.cc) registers itself:
//   static mlcd::cli::CommandRegistration reg(10, [](CLI::App& app, mlcd::cli::Context& ctx) {
//     auto* labels = app.add_subcommand("labels", "...");
//     ...
//     sub->callback([&ctx] { ctx.exit_code = RunGet(ctx, ...); });
//   });
// Files are compiled straight into the mlcdctl executable (client/CMakeLists.txt globs
// *_commands.cc), so the static registrations are always linked in.
#pragma once

#include <CLI/CLI.hpp>

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/command.h"
#include "common/mutex.h"
#include "common/status.h"

namespace mlcd::cli {

// Exit codes (documented in `mlcdctl --help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,        // anything not listed below
  kExitUsage = 2,          // bad flags or arguments (INVALID_ARGUMENT)
  kExitNotFound = 3,       // NOT_FOUND
  kExitAlreadyExists = 4,  // ALREADY_EXISTS
  kExitPrecondition = 5,   // FAILED_PRECONDITION
  kExitUnavailable = 6,    // a service could not be reached (UNAVAILABLE, DEADLINE_EXCEEDED)
  kExitCancelled = 7,      // CANCELLED, e.g. Ctrl-C / SIGTERM (InterruptGuard) while watching a job
  kExitDenied = 8,         // UNAUTHENTICATED or PERMISSION_DENIED (token missing, unknown, expired;
                           // a role that may not; not the job's submitter)
  kExitJobFailed = 10,     // watched job ended FAILED
  kExitJobCancelled = 11,  // watched job ended CANCELLED
};

int ExitCodeFor(const Status& status);

enum class OutputFormat { kText, kJson };

struct Context {
  std::string coordinator;      // --coordinator / MLCD_COORDINATOR
  std::string labelstore;       // --labelstore / MLCD_LABELSTORE
  std::string clusterd;         // --clusterd / MLCD_CLUSTERD
  std::string output = "text";  // --output text|json
  double timeout_seconds = 30;  // --timeout: deadline of unary calls
  int exit_code = kExitOk;

  OutputFormat format() const {
    return output == "json" ? OutputFormat::kJson : OutputFormat::kText;
  }
  std::chrono::system_clock::time_point Deadline() const;
  // Prints "error: <message>" to stderr (control characters escaped, line breaks kept) and
  // returns the matching exit code.
  int Fail(const Status& status) const;
};

// mlcdctl's commands in the executables' one command registry (common/command.h), with the
// Context as their argument. `order` sorts the commands in --help.
using CommandRegistrar = ::mlcd::CommandRegistrar<Context&>;
using CommandRegistration = ::mlcd::CommandRegistration<Context&>;

// Runs every registration (sorted by order) against `app`.
inline void AddRegisteredCommands(CLI::App& app, Context& ctx) {
  ::mlcd::AddRegisteredCommands<Context&>(app, ctx);
}

// True when stdout is a terminal (progress bars) rather than a pipe or file (plain lines).
bool StdoutIsTerminal();

// Progress display: a redrawn single-line bar on a terminal, one plain line per Update()
// (rate-limited to one per `plain_interval`) otherwise. The texts given are shown with
// control characters escaped (common/format.h): they quote job messages, i.e. data.
class ProgressDisplay {
 public:
  explicit ProgressDisplay(std::string title,
                           std::chrono::milliseconds plain_interval = std::chrono::seconds(2));
  ~ProgressDisplay();
  // `fraction` in [0,1] or < 0 when unknown; `detail` is shown after the bar.
  void Update(double fraction, const std::string& detail);
  // A line that stays (e.g. a k-means iteration summary), printed above the bar.
  void Line(const std::string& text);
  void Finish(const std::string& detail);

 private:
  std::string title_;
  bool tty_;
  std::chrono::milliseconds plain_interval_;
  std::chrono::steady_clock::time_point last_plain_;
  bool drawn_ = false;
};

// "1.2 s", "3 m 04 s", "1 h 02 m".
std::string FormatDuration(double seconds);

// Turns Ctrl-C (SIGINT) and SIGTERM into a clean stop while it lives: instead of killing
// mlcdctl, the signal sets interrupted() and runs the registered cancel function (e.g. the
// TryCancel of a blocking stream), so the command can finish its output and exit with
// kExitCancelled. A second signal ends the process at once (the previous handlers are back).
//
//   InterruptGuard interrupt;
//   grpc::ClientContext context;
//   InterruptGuard::Cancel cancel(&interrupt, [&context] { context.TryCancel(); });
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  bool interrupted();
  // Sleeps up to `timeout`; returns interrupted() (early when a signal arrives).
  bool WaitFor(std::chrono::milliseconds timeout);

  // Registers `fn` for the scope of this object; runs it at once when already interrupted.
  class Cancel {
   public:
    Cancel(InterruptGuard* guard, std::function<void()> fn);
    ~Cancel();
    Cancel(const Cancel&) = delete;
    Cancel& operator=(const Cancel&) = delete;

   private:
    InterruptGuard* guard_;
  };

 private:
  void SetCancel(std::function<void()> fn);

  Mutex mu_;
  std::condition_variable cv_;
  bool interrupted_ GUARDED_BY(mu_) = false;
  bool done_ GUARDED_BY(mu_) = false;
  std::function<void()> cancel_ GUARDED_BY(mu_);
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  std::thread watcher_;
};

}  // namespace mlcd::cli
