#include "common/format.h"

#include <cstdio>
#include <ctime>

namespace mlcd {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string FormatBytes(uint64_t bytes) {
  char buf[32];
  if (bytes < 1024)
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else if (bytes < (1u << 20))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
  else if (bytes < (1u << 30))
    std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1048576.0);
  else
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

std::string FormatUtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace mlcd
