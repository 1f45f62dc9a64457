#include "common/log.h"

#include <sys/time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "common/format.h"
#include "common/mutex.h"

namespace mlcd {
namespace {

LogLevel InitialLevel() {
  LogLevel level = LogLevel::kINFO;
  if (const char* env = std::getenv("MLCD_LOG_LEVEL")) ParseLogLevel(env, &level);
  return level;
}

std::atomic<int> g_level{static_cast<int>(InitialLevel())};
Mutex g_mu;
std::string g_component GUARDED_BY(g_mu);

}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  if (text == "debug")
    *level = LogLevel::kDEBUG;
  else if (text == "info")
    *level = LogLevel::kINFO;
  else if (text == "warning" || text == "warn")
    *level = LogLevel::kWARNING;
  else if (text == "error")
    *level = LogLevel::kERROR;
  else
    return false;
  return true;
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void SetLogComponent(const std::string& component) {
  MutexLock lock(&g_mu);
  g_component = component;
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  (void)file;
  (void)line;
}

LogMessage::~LogMessage() {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
  // One line per message, whatever it quotes: data-derived text (a tar member's name, a job's
  // message) could hold ESC, BEL or a newline that forges lines.
  const std::string text = EscapeControlChars(stream_.str());
  MutexLock lock(&g_mu);
  std::fprintf(stderr, "%s.%03dZ %c %s] %s\n", when, static_cast<int>(tv.tv_usec / 1000),
               kLetters[static_cast<int>(level_)],
               g_component.empty() ? "mlcd" : g_component.c_str(), text.c_str());
  std::fflush(stderr);
}

}  // namespace mlcd
