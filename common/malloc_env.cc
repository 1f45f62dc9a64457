#include "common/malloc_env.h"

#include <malloc.h>

#include <cstdlib>
#include <initializer_list>

namespace mlcd {

bool KeepFreedMemoryForReuse() {
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MLCD_NO_MALLOC_TUNING"}) {
    if (std::getenv(name) != nullptr) return false;
  }
  // Both are needed: a fixed trim threshold alone also switches off glibc's adaptive mmap
  // threshold and leaves every block above 128 KiB to mmap (slower than the defaults).
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, kMallocMmapThresholdBytes) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, kMallocTrimThresholdBytes) == 1;
  return mmap_set && trim_set;
}

}  // namespace mlcd
