// What label-set ownership checks cost (issue 30, finding 3; docs/security.md, "Label-set
// ownership") on WriteLabels and GetLabels at batch 1024, same build, same run.
//
// One LabelStorage (real RocksDB, in a temporary folder) holds set "owned" (owner
// token:alice, --ids rows, l = 8). Each round times, alternately and in rotating order:
//   write, checked    Write of one 1024-row message with the service's ownership check
//                     (labelstore/ownership.h CheckChange for alice acting as herself, as the
//                     service passes it on a stream's first message) + SyncWal, as WriteLabels
//   write, unchecked  the same without the check (may_change = null: the check disabled)
//   read, owned / unowned  GetLabels of 1024 ids from "owned" and from "unowned" (a set
//                     without an owner, as made before owners were kept): reads carry no
//                     ownership check, so both run the same code; the pair is the noise floor
// The figure per side is the median over rounds of the mean time per call; the overhead is
// checked / unchecked - 1. Storage-level, so gRPC's own variance (tens of microseconds on a
// shared machine) does not drown a check that costs well under a microsecond.
//
//   ownership_bench [--ids 100000] [--batch 1024] [--seconds 1] [--rounds 5]
//                   [--out bench/results/security_ownership.json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "common/security.h"
#include "labelstore/ownership.h"
#include "labelstore/storage.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kL = 8;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Bench {
  labelstore::LabelStorage* storage;
  std::vector<uint64_t> pool;
  size_t batch;
  Principal alice;
  size_t offset = 0;
  std::mt19937 rng{3};

  const uint64_t* NextIds() {
    if (offset + batch > pool.size()) offset = 0;
    const uint64_t* ids = pool.data() + offset;
    offset += batch;
    return ids;
  }

  // One WriteLabels-like call: a 1024-row message, checked or not, then the WAL sync.
  Status Write(bool checked, const std::string& name = "owned") {
    v1::WriteLabelsRequest message;
    const uint64_t* ids = NextIds();
    message.mutable_sample_ids()->Add(ids, ids + batch);
    message.mutable_labels()->Resize(static_cast<int>(batch * kL), 0);
    for (auto& l : *message.mutable_labels()) l = static_cast<int32_t>(rng() % 100000);
    labelstore::LabelStorage::ChangeCheck check;
    if (checked) {
      check = [&](const std::string& owner) {
        return labelstore::CheckChange(name, owner, alice, labelstore::SetChange::kWrite);
      };
    }
    MLCD_RETURN_IF_ERROR(storage->Write(name, message, 0, check).status());
    return storage->SyncWal();
  }

  Status Read(const std::string& name, v1::GetLabelsResponse* response) {
    return storage->GetLabels(name, NextIds(), batch, false, response);
  }

  // Mean seconds per call of `op` over `seconds`.
  template <typename Op>
  double Time(double seconds, int64_t* calls, const Op& op) {
    int64_t n = 0;
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      Status s = op();
      if (!s.ok()) {
        std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
        std::exit(1);
      }
      ++n;
    }
    *calls += n;
    return std::chrono::duration<double>(Clock::now() - start).count() / std::max<int64_t>(1, n);
  }
};

int Run(int argc, char** argv) {
  uint64_t ids = 100000;
  size_t batch = 1024;
  double seconds = 1;
  int rounds = 5;
  std::string out;
  CLI::App app{"ownership_bench: WriteLabels and GetLabels with and without ownership checks"};
  app.add_option("--ids", ids, "rows in the label set")->capture_default_str();
  app.add_option("--batch", batch, "ids per call")->capture_default_str();
  app.add_option("--seconds", seconds, "seconds per side per round")->capture_default_str();
  app.add_option("--rounds", rounds, "alternating rounds")->capture_default_str();
  app.add_option("--out", out, "JSON results file");
  CLI11_PARSE(app, argc, argv);

  testing::TempDir dir;
  labelstore::LabelStorageOptions options;
  options.data_dir = dir.Sub("db");
  options.compact_on_seal = false;
  auto storage = labelstore::LabelStorage::Open(options);
  if (!storage.ok()) {
    std::fprintf(stderr, "error: %s\n", storage.status().ToString().c_str());
    return 1;
  }
  v1::CreateLabelSetRequest create;
  create.set_num_classes(100000);
  create.set_labels_per_sample(kL);
  for (const char* owner : {"token:alice", ""}) {
    create.set_name(*owner ? "owned" : "unowned");
    if (auto s = (*storage)->Create(create, owner); !s.ok()) return 1;
  }
  Bench b{storage->get(), std::vector<uint64_t>(ids), batch, {}};
  b.alice.identity = "token:alice";
  b.alice.role = Role::kSubmitter;
  b.alice.checked = true;
  for (uint64_t i = 0; i < ids; ++i) b.pool[i] = i;
  std::shuffle(b.pool.begin(), b.pool.end(), std::mt19937(11));
  for (size_t i = 0; i < ids / batch + 1; ++i) {  // every id once in both sets
    (void)b.Write(false, "owned");
    (void)b.Write(false, "unowned");
  }

  v1::GetLabelsResponse response;
  const std::function<Status()> ops[4] = {
      [&] { return b.Write(true); }, [&] { return b.Write(false); },
      [&] { return b.Read("owned", &response); }, [&] { return b.Read("unowned", &response); }};
  std::vector<double> lat[4];
  int64_t calls[4] = {0, 0, 0, 0};
  for (auto& op : ops) {
    int64_t warm = 0;
    b.Time(0.2, &warm, op);
  }
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 4; ++k) {
      const int s = (r + k) % 4;
      lat[s].push_back(b.Time(seconds, &calls[s], ops[s]));
    }
  }
  const double wc = Median(lat[0]), wu = Median(lat[1]), rc = Median(lat[2]), ru = Median(lat[3]);
  std::printf("%-12s %18s %18s %10s\n", "batch", "checked/owned us", "unchecked/unowned us",
              "overhead");
  std::printf("%-12s %18.1f %18.1f %9.2f%%\n", "WriteLabels", wc * 1e6, wu * 1e6,
              (wc / wu - 1) * 100);
  std::printf("%-12s %18.1f %18.1f %9.2f%%\n", "GetLabels", rc * 1e6, ru * 1e6,
              (rc / ru - 1) * 100);
  nlohmann::json j{{"what", "label-set ownership checks, storage level, same build and run"},
                   {"batch", batch},
                   {"ids_in_set", ids},
                   {"labels_per_sample", kL},
                   {"seconds_per_round", seconds},
                   {"rounds", rounds},
                   {"write_labels",
                    {{"checked_seconds_per_call", wc},
                     {"unchecked_seconds_per_call", wu},
                     {"overhead_fraction", wc / wu - 1},
                     {"checked_rounds", lat[0]},
                     {"unchecked_rounds", lat[1]},
                     {"calls", {calls[0], calls[1]}}}},
                   {"get_labels",
                    {{"owned_set_seconds_per_call", rc},
                     {"unowned_set_seconds_per_call", ru},
                     {"overhead_fraction", rc / ru - 1},
                     {"note", "reads carry no ownership check: both sides run the same code"},
                     {"calls", {calls[2], calls[3]}}}}};
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace mlcd

int main(int argc, char** argv) { return mlcd::Run(argc, argv); }
