// The memory high-water mark of the benchmark's own process, for benchmarks that report what a
// run needed beside how fast it ran. Header-only, like process_cpu.h.
#pragma once

#include <sys/resource.h>

namespace mlcd::bench {

// The peak resident set of this process so far, in MiB (getrusage's ru_maxrss, KiB on Linux).
inline double PeakRssMiB() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

}  // namespace mlcd::bench
