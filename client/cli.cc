#include "client/cli.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "common/format.h"

namespace mlcd::cli {
namespace {

// Set by the signal handler (async-signal-safe), picked up by InterruptGuard's thread.
std::atomic<bool> g_interrupt_signal{false};

void OnInterruptSignal(int) { g_interrupt_signal.store(true); }

}  // namespace

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return kExitUsage;
    case StatusCode::kNotFound:
      return kExitNotFound;
    case StatusCode::kAlreadyExists:
      return kExitAlreadyExists;
    case StatusCode::kFailedPrecondition:
      return kExitPrecondition;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case StatusCode::kCancelled:
      return kExitCancelled;
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return kExitDenied;
    default:
      return kExitFailure;
  }
}

std::chrono::system_clock::time_point Context::Deadline() const {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
}

int Context::Fail(const Status& status) const {
  // The message may quote data (a member name, a job's message): control characters escaped,
  // line breaks kept (a spec's problems come one per line).
  std::cerr << "error: " << EscapeControlChars(status.ToString(), LineBreaks::kKeep) << "\n";
  return ExitCodeFor(status);
}

bool StdoutIsTerminal() { return ::isatty(STDOUT_FILENO) == 1; }

ProgressDisplay::ProgressDisplay(std::string title, std::chrono::milliseconds plain_interval)
    : title_(EscapeControlChars(title)),
      tty_(StdoutIsTerminal()),
      plain_interval_(plain_interval) {}

ProgressDisplay::~ProgressDisplay() {
  if (tty_ && drawn_) std::printf("\n");
  std::fflush(stdout);
}

void ProgressDisplay::Update(double fraction, const std::string& raw_detail) {
  const std::string detail = EscapeControlChars(raw_detail);
  if (tty_) {
    constexpr int kWidth = 30;
    std::string bar;
    if (fraction >= 0) {
      int filled = static_cast<int>(std::round(std::min(1.0, fraction) * kWidth));
      bar = "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] ";
      char pct[16];
      std::snprintf(pct, sizeof(pct), "%5.1f%% ", 100.0 * std::min(1.0, fraction));
      bar += pct;
    }
    std::printf("\r\033[2K%s %s%s", title_.c_str(), bar.c_str(), detail.c_str());
    std::fflush(stdout);
    drawn_ = true;
    return;
  }
  auto now = std::chrono::steady_clock::now();
  if (now - last_plain_ < plain_interval_) return;
  last_plain_ = now;
  if (fraction >= 0)
    std::printf("%s %.1f%% %s\n", title_.c_str(), 100.0 * std::min(1.0, fraction), detail.c_str());
  else
    std::printf("%s %s\n", title_.c_str(), detail.c_str());
  std::fflush(stdout);
}

void ProgressDisplay::Line(const std::string& text) {
  if (tty_ && drawn_) std::printf("\r\033[2K");
  std::printf("%s\n", EscapeControlChars(text).c_str());
  std::fflush(stdout);
  drawn_ = false;
}

void ProgressDisplay::Finish(const std::string& detail) {
  if (tty_ && drawn_) std::printf("\r\033[2K");
  drawn_ = false;
  std::printf("%s %s\n", title_.c_str(), EscapeControlChars(detail).c_str());
  std::fflush(stdout);
}

std::string FormatDuration(double seconds) {
  char buf[64];
  if (!(seconds >= 0) || std::isinf(seconds)) return "?";
  if (seconds < 60)
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  else if (seconds < 3600)
    std::snprintf(buf, sizeof(buf), "%d m %02d s", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  else
    std::snprintf(buf, sizeof(buf), "%d h %02d m", static_cast<int>(seconds) / 3600,
                  (static_cast<int>(seconds) % 3600) / 60);
  return buf;
}

InterruptGuard::InterruptGuard() {
  g_interrupt_signal.store(false);
  struct sigaction action {};
  action.sa_handler = OnInterruptSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &old_int_);
  ::sigaction(SIGTERM, &action, &old_term_);
  watcher_ = std::thread([this] {
    MutexLock lock(&mu_);
    while (!done_) {
      if (g_interrupt_signal.load()) {
        interrupted_ = true;
        ::sigaction(SIGINT, &old_int_, nullptr);
        ::sigaction(SIGTERM, &old_term_, nullptr);
        if (cancel_) cancel_();  // under mu_: the Cancel scope cannot end meanwhile
        cv_.notify_all();
        return;
      }
      cv_.wait_for(lock.native(), std::chrono::milliseconds(50));
    }
  });
}

InterruptGuard::~InterruptGuard() {
  {
    MutexLock lock(&mu_);
    done_ = true;
  }
  cv_.notify_all();
  watcher_.join();
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

bool InterruptGuard::interrupted() {
  MutexLock lock(&mu_);
  return interrupted_;
}

bool InterruptGuard::WaitFor(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  cv_.wait_for(lock.native(), timeout, [this] {
    mu_.AssertHeld();
    return interrupted_;
  });
  return interrupted_;
}

void InterruptGuard::SetCancel(std::function<void()> fn) {
  MutexLock lock(&mu_);
  cancel_ = std::move(fn);
  if (interrupted_ && cancel_) cancel_();
}

InterruptGuard::Cancel::Cancel(InterruptGuard* guard, std::function<void()> fn) : guard_(guard) {
  guard_->SetCancel(std::move(fn));
}

InterruptGuard::Cancel::~Cancel() { guard_->SetCancel(nullptr); }

}  // namespace mlcd::cli
