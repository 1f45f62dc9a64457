// Wall-clock time as the services record it (job, label-set and event timestamps).
#pragma once

#include <cstdint>

namespace mlcd {

// Milliseconds since the Unix epoch, from the system clock.
int64_t NowUnixMs();

}  // namespace mlcd
