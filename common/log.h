// Minimal leveled logging to stderr: one line per message with time, level and component;
// control characters in a message (newlines included) are written escaped (common/format.h).
//
//   MLCD_LOG(INFO) << "listening on " << address;
//
// Levels: DEBUG < INFO < WARNING < ERROR. The threshold comes from SetLogLevel() (services
// set it from --log-level) or the MLCD_LOG_LEVEL environment variable.
#pragma once

#include <sstream>
#include <string>

namespace mlcd {

enum class LogLevel { kDEBUG = 0, kINFO = 1, kWARNING = 2, kERROR = 3 };

void SetLogLevel(LogLevel level);
// Parses "debug" | "info" | "warning" | "error"; false when unknown.
bool ParseLogLevel(const std::string& text, LogLevel* level);
bool LogEnabled(LogLevel level);
// Name shown on every line, e.g. "labelstore" or "worker r1".
void SetLogComponent(const std::string& component);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Turns the streamed expression into void so MLCD_LOG works as one expression (no dangling
// else when used under an unbraced if).
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace mlcd

#define MLCD_LOG(level)                           \
  !::mlcd::LogEnabled(::mlcd::LogLevel::k##level) \
      ? (void)0                                   \
      : ::mlcd::LogVoidify() &                    \
            ::mlcd::LogMessage(::mlcd::LogLevel::k##level, __FILE__, __LINE__).stream()
