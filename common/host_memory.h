// Memory this process may still take on its host, for checks made before a large load (the
// clustering gang's ranks: worker/cluster/rank_memory.h).
#pragma once

#include <cstdint>

namespace mlcd {

// /proc/meminfo's MemAvailable, lowered to what the process's cgroup v2 limit leaves
// (memory.max - memory.current) when there is one: inside a container MemAvailable is the
// node's. -1 when neither can be read.
int64_t HostBytesAvailable();

}  // namespace mlcd
