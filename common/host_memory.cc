#include "common/host_memory.h"

#include <algorithm>
#include <fstream>
#include <string>

namespace mlcd {
namespace {

int64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return -1;
}

// A number from a cgroup v2 file, or -1 ("max", missing, unreadable).
int64_t CgroupValue(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return -1;
  try {
    return std::stoll(v);
  } catch (...) {
    return -1;
  }
}

// What the process's cgroup v2 limit leaves (memory.max - memory.current), or -1. The cgroup
// is the line "0::/path" of /proc/self/cgroup; inside a container it is usually "/", mounted
// at /sys/fs/cgroup.
int64_t CgroupHeadroom() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, rel;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) rel = line.substr(3);
  }
  if (rel.empty()) return -1;
  for (const std::string& dir : {"/sys/fs/cgroup" + rel, std::string("/sys/fs/cgroup")}) {
    const int64_t max = CgroupValue(dir + "/memory.max");
    if (max < 0) continue;
    const int64_t current = CgroupValue(dir + "/memory.current");
    return std::max<int64_t>(0, max - std::max<int64_t>(0, current));
  }
  return -1;
}

}  // namespace

int64_t HostBytesAvailable() {
  const int64_t available = MemAvailable();
  const int64_t headroom = CgroupHeadroom();
  if (available < 0) return headroom;
  return headroom < 0 ? available : std::min(available, headroom);
}

}  // namespace mlcd
