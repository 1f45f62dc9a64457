// CPU time of a process, for benchmarks that report a server's (or their own) CPU per call:
// less disturbed by other load on a shared machine than wall-clock figures. Header-only so
// that the benches share it without a library of their own.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace mlcd::bench {

// CPU seconds (user + system, all threads) process `pid` has used so far, from
// /proc/<pid>/stat; 0 when it cannot be read.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace mlcd::bench
