// What label-set ownership checks and write capabilities cost (docs/security.md, "Label-set
// ownership", "Write capabilities") on WriteLabels and GetLabels at batch 1024, same build,
// same run.
//
// One LabelStorage (real RocksDB, in a temporary folder) holds three sets of --ids rows,
// l = 8: "written" (owner token:alice) takes the timed writes; "read_owned" (owner
// token:alice) and "read_unowned" (no owner, as made before owners were kept) are filled
// the same way -- the same ids in the same order, a batch of one then of the other -- then
// flushed and compacted together, and never written again, so the two read arms read the
// same kind of data from the same RocksDB files. The arms, timed call by call in pairs:
//   write, checked    Write of one 1024-row message with the service's ownership check
//                     (labelstore/ownership.h CheckChange for alice acting as herself, the
//                     owner: the path every accepted write takes) + SyncWal, as WriteLabels
//   write, unchecked  the same Write with the check skipped (may_change = null, what the
//                     storage does when no check is given), same set, same message shapes
//   write, capability the same Write checked as a gang rank's is: its write capability
//                     (clients/write_capability.h) verified by the store's WriteGrants
//                     (labelstore/write_grants.h: the delegation key derived, the MAC
//                     recomputed), paired with the unchecked arm in its own phase
//   read, owned / unowned  GetLabels of the same 1024 ids from the two read sets
// The write arms differ only in the check: the storage runs it on a stream's first message
// (set_id 0), and every timed call is one, so this is the most the check can cost a stream.
// Reads carry no ownership check (every reader role may read: docs/security.md), so the
// GetLabels arms differ only in what owners added to a read, the owner kept in the set's
// cached record: same code, the pair measures that nothing was added and the noise floor.
// An admin caller is not used: it takes the same check with one more comparison.
//
// Pairing: each pair is one call of each arm back to back, the order alternating pair by
// pair, so a load change on a shared machine hits both; overhead = median over pairs of
// (A / B - 1). Rounds alternate a phase of write pairs and one of read pairs (--seconds
// each); each round's median is printed too. The check alone (building the storage's
// ChangeCheck and calling it, --check-calls times) is timed as well: its cost over a call's
// is the overhead without the machine's noise. Storage-level, so gRPC's own variance does
// not drown a check that costs well under a microsecond.
//
//   ownership_bench [--ids 100000] [--batch 1024] [--seconds 2.5] [--rounds 5]
//                   [--check-calls 1000000] [--out bench/results/security_ownership.json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/stats.h"
#include "clients/write_capability.h"
#include "common/clock.h"
#include "common/security.h"
#include "labelstore/ownership.h"
#include "labelstore/storage.h"
#include "labelstore/write_grants.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kL = 8;

using ::mlcd::bench::Median;

// How a timed write is checked.
enum class Check { kNone, kOwner, kCapability };

struct Bench {
  labelstore::LabelStorage* storage;
  std::vector<uint64_t> pool;
  size_t batch;
  Principal alice;
  const labelstore::WriteGrants* grants = nullptr;
  std::string capability;  // minted for "written"
  size_t offset = 0;
  std::mt19937 rng{3};

  const uint64_t* NextIds() {
    if (offset + batch > pool.size()) offset = 0;
    const uint64_t* ids = pool.data() + offset;
    offset += batch;
    return ids;
  }

  // The storage's ChangeCheck for alice writing `name`, as the service builds it.
  labelstore::LabelStorage::ChangeCheck MayWrite(const std::string& name) const {
    return [&name, this](const std::string& owner, uint64_t) {
      return labelstore::CheckChange(name, owner, alice, labelstore::SetChange::kWrite);
    };
  }

  // The storage's ChangeCheck for a call carrying `capability`, as the service builds it.
  labelstore::LabelStorage::ChangeCheck CapabilityCheck(const std::string& name) const {
    return [&name, this](const std::string&, uint64_t incarnation) {
      return grants->Check(capability, name, incarnation);
    };
  }

  labelstore::LabelStorage::ChangeCheck For(Check check, const std::string& name) const {
    switch (check) {
      case Check::kOwner:
        return MayWrite(name);
      case Check::kCapability:
        return CapabilityCheck(name);
      case Check::kNone:
        break;
    }
    return labelstore::LabelStorage::ChangeCheck();
  }

  // One WriteLabels-like call: a 1024-row message, checked or not, then the WAL sync.
  Status Write(Check how, const std::string& name = "written") {
    v1::WriteLabelsRequest message;
    const uint64_t* ids = NextIds();
    message.mutable_sample_ids()->Add(ids, ids + batch);
    message.mutable_labels()->Resize(static_cast<int>(batch * kL), 0);
    for (auto& l : *message.mutable_labels()) l = static_cast<int32_t>(rng() % 100000);
    const labelstore::LabelStorage::ChangeCheck check = For(how, name);
    MLCD_RETURN_IF_ERROR(storage->Write(name, message, 0, check).status());
    return storage->SyncWal();
  }

  Status Read(const std::string& name, v1::GetLabelsResponse* response) {
    return storage->GetLabels(name, NextIds(), batch, false, response);
  }
};

// Per-call seconds of the two arms of a comparison, pair by pair.
struct Pairs {
  std::vector<double> a, b;
  std::vector<double> round_overheads;  // each round's median of a / b - 1

  static double Overhead(const std::vector<double>& a, const std::vector<double>& b,
                         size_t from = 0) {
    std::vector<double> ratios;
    for (size_t i = from; i < a.size(); ++i) ratios.push_back(a[i] / b[i] - 1);
    return Median(ratios);
  }
};

double Seconds(const std::function<Status()>& op) {
  const auto start = Clock::now();
  if (Status s = op(); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Pairs of calls of `a` and `b` for `seconds`, the order alternating.
void TimePairs(double seconds, const std::function<Status()>& a, const std::function<Status()>& b,
               Pairs* out) {
  const size_t from = out->a.size();
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (size_t i = 0; Clock::now() < end; ++i) {
    if (i % 2 == 0) {
      out->a.push_back(Seconds(a));
      out->b.push_back(Seconds(b));
    } else {
      out->b.push_back(Seconds(b));
      out->a.push_back(Seconds(a));
    }
  }
  out->round_overheads.push_back(Pairs::Overhead(out->a, out->b, from));
}

// Seconds per check: the ChangeCheck built and called, as one checked write does.
double CheckSeconds(const Bench& b, Check how, int64_t calls, uint64_t incarnation) {
  const std::string name = "written", owner = "token:alice";
  int64_t refused = 0;
  const auto start = Clock::now();
  for (int64_t i = 0; i < calls; ++i) {
    const labelstore::LabelStorage::ChangeCheck check = b.For(how, name);
    refused += !check(owner, incarnation).ok();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (refused != 0) std::exit(1);  // alice owns it, the capability is its own: never refused
  return seconds / static_cast<double>(std::max<int64_t>(1, calls));
}

// Creates the three sets and fills them; the two read sets the same way, then compacted.
Status Fill(Bench* b, uint64_t ids) {
  v1::CreateLabelSetRequest create;
  create.set_num_classes(100000);
  create.set_labels_per_sample(kL);
  for (const auto& [name, owner] : {std::pair<const char*, const char*>{"written", "token:alice"},
                                    {"read_owned", "token:alice"},
                                    {"read_unowned", ""}}) {
    create.set_name(name);
    MLCD_RETURN_IF_ERROR(b->storage->Create(create, owner).status());
  }
  for (size_t i = 0; i < ids / b->batch + 1; ++i) {  // every id once in each set
    const size_t offset = b->offset;
    for (const char* name : {"written", "read_owned", "read_unowned"}) {
      b->offset = offset;  // the same ids, in the same order, in each set
      MLCD_RETURN_IF_ERROR(b->Write(Check::kNone, name));
    }
  }
  b->offset = 0;
  return b->storage->CompactAll();
}

nlohmann::json Figures(const Pairs& p, const std::string& a, const std::string& b) {
  return {{a + "_seconds_per_call", Median(p.a)},
          {b + "_seconds_per_call", Median(p.b)},
          {"overhead_fraction", Pairs::Overhead(p.a, p.b)},
          {"round_overheads", p.round_overheads},
          {"pairs", p.a.size()}};
}

void Print(const char* what, const Pairs& p) {
  std::printf("%-12s %18.1f %20.1f %9.2f%% %7zu  ", what, Median(p.a) * 1e6, Median(p.b) * 1e6,
              Pairs::Overhead(p.a, p.b) * 100, p.a.size());
  for (double r : p.round_overheads) std::printf(" %+.2f%%", r * 100);
  std::printf("\n");
}

// Both comparisons, a write phase and a read phase per round; a pair's two calls take the
// same ids (the second rewinds the cursor to the first's).
void Measure(Bench* b, double seconds, int rounds, Pairs* writes, Pairs* capability_writes,
             Pairs* reads) {
  size_t pair_offset = 0;
  bool first = true;
  auto same_ids = [&] {
    if (first)
      pair_offset = b->offset;
    else
      b->offset = pair_offset;
    first = !first;
  };
  v1::GetLabelsResponse response;
  const std::function<Status()> checked = [&] { return same_ids(), b->Write(Check::kOwner); };
  const std::function<Status()> unchecked = [&] { return same_ids(), b->Write(Check::kNone); };
  const std::function<Status()> capability = [&] {
    return same_ids(), b->Write(Check::kCapability);
  };
  const std::function<Status()> owned = [&] {
    return same_ids(), b->Read("read_owned", &response);
  };
  const std::function<Status()> unowned = [&] {
    return same_ids(), b->Read("read_unowned", &response);
  };
  Pairs warm;
  TimePairs(0.5, checked, unchecked, &warm);
  TimePairs(0.5, capability, unchecked, &warm);
  TimePairs(0.5, owned, unowned, &warm);
  for (int r = 0; r < rounds; ++r) {
    TimePairs(seconds, checked, unchecked, writes);
    TimePairs(seconds, capability, unchecked, capability_writes);
    TimePairs(seconds, owned, unowned, reads);
  }
}

int Run(int argc, char** argv) {
  uint64_t ids = 100000;
  size_t batch = 1024;
  double seconds = 2.5;
  int rounds = 5;
  int64_t check_calls = 1000000;
  std::string out;
  CLI::App app{"ownership_bench: WriteLabels and GetLabels with and without ownership checks"};
  app.add_option("--ids", ids, "rows in the label set")->capture_default_str();
  app.add_option("--batch", batch, "ids per call")->capture_default_str();
  app.add_option("--seconds", seconds, "seconds per phase (writes, reads) per round")
      ->capture_default_str();
  app.add_option("--rounds", rounds, "rounds of a write phase and a read phase")
      ->capture_default_str();
  app.add_option("--check-calls", check_calls, "calls of the check timed alone")
      ->capture_default_str();
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
  Bench b{storage->get(), std::vector<uint64_t>(ids), batch, {}, nullptr, ""};
  b.alice.identity = "token:alice";
  b.alice.role = Role::kSubmitter;
  b.alice.checked = true;
  for (uint64_t i = 0; i < ids; ++i) b.pool[i] = i;
  std::shuffle(b.pool.begin(), b.pool.end(), std::mt19937(11));
  if (Status s = Fill(&b, ids); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  const labelstore::WriteGrants grants((*storage)->capability_secret());
  StatusOr<uint64_t> incarnation = (*storage)->OpenIncarnation("written", nullptr);
  StatusOr<std::string> capability =
      incarnation.ok() ? labelstore::MintWriteCapability(
                             grants.DelegationKey("written", *incarnation), "written", *incarnation,
                             NowUnixMs() / 1000 + 3600, "bench/rank0")
                       : StatusOr<std::string>(incarnation.status());
  if (!capability.ok()) {
    std::fprintf(stderr, "error: %s\n", capability.status().ToString().c_str());
    return 1;
  }
  b.grants = &grants;
  b.capability = *capability;
  Pairs writes, capability_writes, reads;
  Measure(&b, seconds, rounds, &writes, &capability_writes, &reads);
  const double check = CheckSeconds(b, Check::kOwner, check_calls, *incarnation);
  const double capability_check =
      CheckSeconds(b, Check::kCapability, check_calls / 10, *incarnation);
  const double write_seconds = Median(writes.b);
  std::printf("%-12s %18s %20s %10s %7s   %s\n", "batch 1024", "checked/owned us",
              "unchecked/unowned us", "overhead", "pairs", "per round");
  Print("WriteLabels", writes);
  Print("capability", capability_writes);
  Print("GetLabels", reads);
  std::printf("the ownership check alone: %.1f ns = %.5f%% of a write (reads have none)\n",
              check * 1e9, check / write_seconds * 100);
  std::printf("the capability check alone: %.1f ns = %.5f%% of a write\n", capability_check * 1e9,
              capability_check / write_seconds * 100);
  std::printf("(times: medians per call; overhead: median over pairs of A / B - 1)\n");
  nlohmann::json j{
      {"what", "label-set ownership checks, storage level, same build and run, paired calls"},
      {"batch", batch},
      {"ids_in_set", ids},
      {"labels_per_sample", kL},
      {"seconds_per_phase", seconds},
      {"rounds", rounds},
      {"overhead", "median over pairs (one call of each arm, back to back) of A / B - 1"},
      {"write_labels", Figures(writes, "checked", "unchecked")},
      {"write_labels_capability", Figures(capability_writes, "capability", "unchecked")},
      {"capability_check_alone_seconds", capability_check},
      {"capability_check_alone_fraction_of_write", capability_check / write_seconds},
      {"get_labels", Figures(reads, "owned_set", "unowned_set")},
      {"check_alone_seconds", check},
      {"check_alone_fraction_of_write", check / write_seconds},
      {"get_labels_note",
       "reads carry no ownership check: the two sets, written and "
       "compacted alike, differ only in their recorded owner"}};
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace mlcd

int main(int argc, char** argv) { return mlcd::Run(argc, argv); }
