#include "common/blas_env.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/log.h"

namespace mlcd {
namespace {

bool CpuHasFlag(const std::string& flags, const std::string& flag) {
  return (" " + flags + " ").find(" " + flag + " ") != std::string::npos;
}

using GetThreadsFn = int (*)();
using SetThreadsFn = void (*)(int);

GetThreadsFn BlasGet() {
  static auto fn = reinterpret_cast<GetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn;
}
SetThreadsFn BlasSet() {
  static auto fn = reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  return fn;
}

}  // namespace

int BlasThreads() { return BlasGet() ? BlasGet()() : 0; }

void SetBlasThreads(int threads) {
  if (BlasSet() && threads > 0) BlasSet()(threads);
}

void SelectOpenblasCoretype(int argc, char** argv) {
  (void)argc;
  if (const char* chosen = std::getenv("MLCD_OPENBLAS_CORETYPE_CHOSEN")) {
    MLCD_LOG(INFO) << "OPENBLAS_CORETYPE=" << chosen
                   << " chosen at start-up from the CPU flags (set OPENBLAS_CORETYPE yourself or "
                      "MLCD_NO_BLAS_TUNING=1 to override)";
    unsetenv("MLCD_OPENBLAS_CORETYPE_CHOSEN");
    return;
  }
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("MLCD_NO_BLAS_TUNING")) return;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = line.substr(line.find(':') + 1);
      break;
    }
  }
  const char* core = nullptr;
  if (CpuHasFlag(flags, "avx512f") && CpuHasFlag(flags, "avx512bw") &&
      CpuHasFlag(flags, "avx512vl"))
    core = "SkylakeX";
  else if (CpuHasFlag(flags, "avx2") && CpuHasFlag(flags, "fma"))
    core = "Haswell";
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  setenv("MLCD_OPENBLAS_CORETYPE_CHOSEN", core, 1);
  execv("/proc/self/exe", argv);
  // exec failed: go on with the default kernels.
  unsetenv("MLCD_OPENBLAS_CORETYPE_CHOSEN");
  MLCD_LOG(WARNING) << "could not re-execute with OPENBLAS_CORETYPE=" << core << ": "
                    << std::strerror(errno);
}

ScopedOmpThreads::ScopedOmpThreads(int threads) {
  static auto set = reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  static auto get = reinterpret_cast<GetThreadsFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  if (threads <= 0 || set == nullptr || get == nullptr) return;
  saved_ = get();
  set_ = set;
  if (saved_ != threads) set(threads);
}

ScopedOmpThreads::~ScopedOmpThreads() {
  if (set_ != nullptr) set_(saved_);
}

}  // namespace mlcd
