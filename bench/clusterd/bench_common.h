// Shared by the clusterd benchmarks (clusterd_bench, assign_ann_bench): timing, the real
// service binaries as child processes on loopback, medians and the JSON file.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "clients/clusterd_client.h"
#include "clients/labelstore_client.h"
#include "common/file_util.h"
#include "common/net.h"
#include "common/status.h"
#include "common/stopwatch.h"
#include "tests/testing/process.h"

namespace mlcd::bench {

using Clock = std::chrono::steady_clock;

// Directory of this executable: the service binaries are built next to it.
inline std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

// mlcd-labelstore and mlcd-clusterd (--labelstore pointing at it) on free loopback ports, with
// their data and logs under work_dir, and clients of both. Killed when the object goes away.
struct BenchServices {
  std::string labelstore_address;
  std::string clusterd_address;
  testing::ChildProcess labelstore;
  testing::ChildProcess clusterd;
  std::unique_ptr<clusterd::ClusterdClient> client;
  std::unique_ptr<labelstore::LabelStoreClient> store;

  // Starts both and waits until they serve; false (the reason printed) when they do not.
  bool Start(const std::string& work_dir) {
    const std::string bin = SelfDir();
    labelstore_address = "127.0.0.1:" + std::to_string(PickFreePort());
    clusterd_address = "127.0.0.1:" + std::to_string(PickFreePort());
    Status st = labelstore.Start(
        bin + "/mlcd-labelstore",
        {"--listen", labelstore_address, "--metrics-listen", "", "--data-dir", work_dir + "/ls"},
        work_dir + "/labelstore.log");
    if (st.ok()) {
      st = clusterd.Start(bin + "/mlcd-clusterd",
                          {"--listen", clusterd_address, "--metrics-listen", "", "--data-dir",
                           work_dir + "/cd", "--labelstore", labelstore_address},
                          work_dir + "/clusterd.log");
    }
    if (st.ok()) st = testing::WaitForServing(labelstore_address, std::chrono::seconds(60));
    if (st.ok()) st = testing::WaitForServing(clusterd_address, std::chrono::seconds(60));
    if (!st.ok()) {
      std::fprintf(stderr, "error: starting the services: %s\n", st.ToString().c_str());
      return false;
    }
    client = std::make_unique<clusterd::ClusterdClient>(clusterd_address);
    store = std::make_unique<labelstore::LabelStoreClient>(labelstore_address);
    return true;
  }
  void Stop() {
    clusterd.Stop();
    labelstore.Stop();
  }
};

// Whether label set `name` is SEALED with `rows` samples; *samples gets its count (0 when it
// cannot be described).
inline bool SealedWith(const labelstore::LabelStoreClient& store, const std::string& name,
                       int64_t rows, uint64_t* samples) {
  auto info = store.Describe(name);
  *samples = info.ok() ? info->num_samples() : 0;
  return info.ok() && info->state() == v1::LABEL_SET_STATE_SEALED &&
         info->num_samples() == static_cast<uint64_t>(rows);
}

// An empty *work_dir becomes a fresh temporary directory, removed when the result goes away.
inline std::unique_ptr<testing::TempDir> UseWorkDir(std::string* work_dir) {
  if (!work_dir->empty()) return nullptr;
  auto tmp = std::make_unique<testing::TempDir>();
  *work_dir = tmp->path();
  return tmp;
}

// The machine, for the JSON: cores and the OpenBLAS core type in use.
inline void AddMachineJson(nlohmann::json* j) {
  (*j)["cores"] = std::thread::hardware_concurrency();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  (*j)["openblas_coretype"] = coretype ? coretype : "";
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Writes j (indented) to path, creating its directory.
inline void WriteJsonFile(const std::string& path, const nlohmann::json& j) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos) (void)MakeDirs(path.substr(0, slash));
  std::ofstream(path) << j.dump(2) << "\n";
}

}  // namespace mlcd::bench
