// labelstore_writers_bench: W concurrent WriteLabels streams into one label set (issue 28
// item 6: the gang's ranks writing their top-l assignment), rows/s per W, and proof that
// nothing is missing after sealing. Not a test.
//
//   build/bin/labelstore_writers_bench [--rows 200000] [--writers 1,2,4,8] [--batch 1024]
//       [--l 8] [--k 1000000] [--repeats 1] [--out bench/results/labelstore_writers.json]
//
// As the real deployment runs: the mlcd-labelstore binary of this build as a child process on
// a free loopback port with mTLS (certificates made by openssl at run time) and a tokens file;
// this process is a service (client certificate, no token) acting for the job "bench", as the
// coordinator's phases do, so the set is "job/bench/w<W>" and every call passes the ownership
// check. For each W (a fresh server and data dir each time):
//   1. CreateLabelSet (k, l, with scores: what clusterd and the gang write).
//   2. W threads, each with its own channel and TCP connection (a local subchannel pool),
//      write the disjoint id range [r*rows/W, (r+1)*rows/W) in messages of --batch rows
//      (l labels + l descending scores per row), then Finish (durable). Timed from the start
//      barrier to the last Finish: rows/s. Also the server's CPU seconds per million rows.
//   3. SealLabelSet (require_open), num_samples must equal rows.
//   4. Every row read back (GetLabels with scores, 8192 ids per call) and compared bit for bit;
//      any missing or different row fails the run (exit 1).
// With --repeats R the W list runs R times, alternating order; the figure per W is the median.
// --in-process also runs the same W writers as threads calling the storage layer
// (LabelStorage::Write, then SyncWal) in this process, with messages built before the clock
// starts: what the store itself does with concurrent writers of one set, without gRPC or TLS.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <unistd.h>

#include "bench/process_cpu.h"
#include "bench/stats.h"
#include "clients/labelstore_client.h"
#include "common/acting_for.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "common/security.h"
#include "labelstore/storage.h"
#include "tests/testing/process.h"
#include "tests/testing/security.h"

namespace mlcd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kJob[] = "bench";
constexpr size_t kVerifyIdsPerCall = 8192;

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string path(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return path.substr(0, path.rfind('/'));
}

// The rows every run writes: row i has l distinct labels in [0, k) and l descending scores.
struct Rows {
  int l = 0;
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  std::vector<float> scores;
};

Rows MakeRows(size_t n, int l, int k) {
  Rows rows;
  rows.l = l;
  rows.ids.resize(n);
  rows.labels.resize(n * l);
  rows.scores.resize(n * l);
  std::mt19937_64 rng(28);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  for (size_t i = 0; i < n; ++i) {
    rows.ids[i] = i;
    float score = 1.f;
    for (int j = 0; j < l; ++j) {
      int32_t label;
      do {
        label = static_cast<int32_t>(rng() % static_cast<uint64_t>(k));
      } while (std::find(&rows.labels[i * l], &rows.labels[i * l + j], label) !=
               &rows.labels[i * l + j]);
      rows.labels[i * l + j] = label;
      score -= 0.1f * unit(rng);
      rows.scores[i * l + j] = score;
    }
  }
  return rows;
}

// One connection per writer: a channel with a subchannel pool of its own (gRPC would share
// one TCP connection between channels of equal arguments otherwise).
labelstore::LabelStoreClient OwnClient(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  labelstore::LabelStoreClientOptions options;
  options.acting_for = ActingForJob(kJob);
  return labelstore::LabelStoreClient(CreateSecureChannel(address, args), address, options);
}

// Rank r's rows [begin, end) in messages of `batch` rows, then Finish.
Status WriteRange(const labelstore::LabelStoreClient& client, const std::string& set,
                  const Rows& rows, size_t begin, size_t end, size_t batch) {
  std::unique_ptr<labelstore::LabelWriter> writer = client.OpenWriter(set);
  const size_t l = static_cast<size_t>(rows.l);
  for (size_t b = begin; b < end; b += batch) {
    const size_t n = std::min(batch, end - b);
    MLCD_RETURN_IF_ERROR(
        writer->Write(&rows.ids[b], n, &rows.labels[b * l], n * l, &rows.scores[b * l], n * l));
  }
  StatusOr<v1::WriteLabelsResponse> done = writer->Finish();
  if (!done.ok()) return done.status();
  if (done->rows_written() != end - begin) {
    return Status::DataLoss("writer acknowledged " + std::to_string(done->rows_written()) +
                            " rows, sent " + std::to_string(end - begin));
  }
  return Status::Ok();
}

// W writer threads released together; returns the seconds from release to the last Finish.
StatusOr<double> WriteConcurrently(const std::string& address, const std::string& set,
                                   const Rows& rows, int writers, size_t batch) {
  std::vector<labelstore::LabelStoreClient> clients;
  for (int r = 0; r < writers; ++r) clients.push_back(OwnClient(address));
  for (auto& c : clients) MLCD_RETURN_IF_ERROR(c.WaitUntilReachable(std::chrono::seconds(10)));
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<Status> results(writers);
  std::vector<std::thread> threads;
  const size_t n = rows.ids.size();
  for (int r = 0; r < writers; ++r) {
    threads.emplace_back([&, r] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      results[r] = WriteRange(clients[r], set, rows, n * r / writers, n * (r + 1) / writers, batch);
    });
  }
  const auto t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int r = 0; r < writers; ++r) {
    if (!results[r].ok()) return results[r].WithContext("writer " + std::to_string(r));
  }
  return seconds;
}

// Every row read back and compared bit for bit with what was written.
Status VerifyAll(const labelstore::LabelStoreClient& client, const std::string& set,
                 const Rows& rows) {
  labelstore::LabelBatch batch;
  const size_t l = static_cast<size_t>(rows.l);
  for (size_t b = 0; b < rows.ids.size(); b += kVerifyIdsPerCall) {
    const size_t n = std::min(kVerifyIdsPerCall, rows.ids.size() - b);
    MLCD_RETURN_IF_ERROR(client.GetLabels(set, &rows.ids[b], n, true, &batch));
    if (!batch.missing_ids.empty()) {
      return Status::DataLoss(std::to_string(batch.missing_ids.size()) + " of ids [" +
                              std::to_string(b) + ", " + std::to_string(b + n) +
                              ") missing after sealing, first " +
                              std::to_string(batch.missing_ids[0]));
    }
    if (std::memcmp(batch.labels.data(), &rows.labels[b * l], n * l * sizeof(int32_t)) != 0 ||
        std::memcmp(batch.scores.data(), &rows.scores[b * l], n * l * sizeof(float)) != 0) {
      return Status::DataLoss("rows of ids [" + std::to_string(b) + ", " + std::to_string(b + n) +
                              ") differ from what was written");
    }
  }
  return Status::Ok();
}

struct RunFigures {
  int writers = 0;
  double seconds = 0;
  double rows_per_second = 0;
  double server_cpu_seconds = 0;
  double seal_seconds = 0;
  double verify_seconds = 0;
  uint64_t size_bytes = 0;
};

// Create, write concurrently, seal, verify on the server at `address` (process `pid`).
StatusOr<RunFigures> WriteSealVerify(const std::string& address, pid_t pid, const Rows& rows,
                                     int writers, size_t batch, int k) {
  labelstore::LabelStoreClient client = OwnClient(address);
  const std::string set = std::string("job/") + kJob + "/w" + std::to_string(writers);
  labelstore::LabelSetSpec spec{set, k, rows.l, /*with_scores=*/true, {}};
  MLCD_RETURN_IF_ERROR(client.CreateLabelSet(spec).status());

  RunFigures f;
  f.writers = writers;
  const double cpu0 = bench::ProcessCpuSeconds(pid);
  MLCD_ASSIGN_OR_RETURN(f.seconds, WriteConcurrently(address, set, rows, writers, batch));
  f.server_cpu_seconds = bench::ProcessCpuSeconds(pid) - cpu0;
  f.rows_per_second = static_cast<double>(rows.ids.size()) / f.seconds;

  auto t0 = Clock::now();
  MLCD_ASSIGN_OR_RETURN(v1::LabelSetInfo sealed, client.Seal(set, /*require_open=*/true));
  f.seal_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  f.size_bytes = sealed.size_bytes();
  if (sealed.num_samples() != rows.ids.size()) {
    return Status::DataLoss("sealed set holds " + std::to_string(sealed.num_samples()) +
                            " samples, " + std::to_string(rows.ids.size()) + " were written");
  }
  t0 = Clock::now();
  MLCD_RETURN_IF_ERROR(VerifyAll(client, set, rows));
  f.verify_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return f;
}

// One W on a fresh server and data dir.
StatusOr<RunFigures> RunOnce(const std::string& dir, const Rows& rows, int writers, size_t batch,
                             int k) {
  const std::string address = "127.0.0.1:" + std::to_string(PickFreePort());
  std::filesystem::create_directories(dir);
  testing::ChildProcess server;
  MLCD_RETURN_IF_ERROR(server.Start(SelfDir() + "/mlcd-labelstore",
                                    {"--listen", address, "--metrics-listen", "", "--data-dir",
                                     dir + "/store", "--log-level", "warning"},
                                    dir + "/server.log", testing::NoTokenEnv()));
  MLCD_RETURN_IF_ERROR(testing::WaitForServing(address, std::chrono::seconds(30)));
  StatusOr<RunFigures> f = WriteSealVerify(address, server.pid(), rows, writers, batch, k);
  // Every channel is closed by now, so the server stops without waiting out its grace.
  server.Stop();
  return f;
}

// Rank r's messages of `batch` rows, as the service receives them.
std::vector<v1::WriteLabelsRequest> Messages(const Rows& rows, size_t begin, size_t end,
                                             size_t batch) {
  std::vector<v1::WriteLabelsRequest> out;
  const size_t l = static_cast<size_t>(rows.l);
  for (size_t b = begin; b < end; b += batch) {
    const size_t n = std::min(batch, end - b);
    v1::WriteLabelsRequest m;
    m.mutable_sample_ids()->Add(&rows.ids[b], &rows.ids[b] + n);
    m.mutable_labels()->Add(&rows.labels[b * l], &rows.labels[b * l] + n * l);
    m.mutable_scores()->Add(&rows.scores[b * l], &rows.scores[b * l] + n * l);
    out.push_back(std::move(m));
  }
  return out;
}

// The storage layer alone: W threads writing their ranges into one set, a SyncWal each (as a
// stream's end does), then seal and every row compared. `server_cpu_seconds` is this process's.
StatusOr<RunFigures> InProcessOnce(const std::string& dir, const Rows& rows, int writers,
                                   size_t batch, int k) {
  labelstore::LabelStorageOptions options;
  options.data_dir = dir;
  options.compact_on_seal = false;
  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<labelstore::LabelStorage> storage,
                        labelstore::LabelStorage::Open(options));
  const std::string set = "bench";
  v1::CreateLabelSetRequest create;
  create.set_name(set);
  create.set_num_classes(k);
  create.set_labels_per_sample(rows.l);
  create.set_with_scores(true);
  MLCD_RETURN_IF_ERROR(storage->Create(create).status());
  const size_t n = rows.ids.size();
  std::vector<std::vector<v1::WriteLabelsRequest>> messages;
  for (int r = 0; r < writers; ++r)
    messages.push_back(Messages(rows, n * r / writers, n * (r + 1) / writers, batch));
  std::vector<Status> results(writers);
  std::vector<std::thread> threads;
  RunFigures f;
  f.writers = writers;
  const double cpu0 = bench::ProcessCpuSeconds(::getpid());
  const auto t0 = Clock::now();
  for (int r = 0; r < writers; ++r) {
    threads.emplace_back([&, r] {
      for (const auto& m : messages[r]) {
        StatusOr<labelstore::WriteResult> w = storage->Write(set, m);
        if (!w.ok()) {
          results[r] = w.status();
          return;
        }
      }
      results[r] = storage->SyncWal();
    });
  }
  for (auto& t : threads) t.join();
  f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  f.server_cpu_seconds = bench::ProcessCpuSeconds(::getpid()) - cpu0;
  f.rows_per_second = static_cast<double>(n) / f.seconds;
  for (const Status& st : results) MLCD_RETURN_IF_ERROR(st);
  MLCD_ASSIGN_OR_RETURN(v1::LabelSetInfo sealed, storage->Seal(set, true));
  if (sealed.num_samples() != n) {
    return Status::DataLoss("sealed set holds " + std::to_string(sealed.num_samples()) +
                            " samples, " + std::to_string(n) + " were written");
  }
  v1::GetLabelsResponse got;
  const size_t l = static_cast<size_t>(rows.l);
  for (size_t b = 0; b < n; b += kVerifyIdsPerCall) {
    const size_t m = std::min(kVerifyIdsPerCall, n - b);
    MLCD_RETURN_IF_ERROR(storage->GetLabels(set, &rows.ids[b], m, true, &got));
    if (got.missing_ids_size() > 0 ||
        std::memcmp(got.labels().data(), &rows.labels[b * l], m * l * sizeof(int32_t)) != 0 ||
        std::memcmp(got.scores().data(), &rows.scores[b * l], m * l * sizeof(float)) != 0) {
      return Status::DataLoss("in-process: rows of ids [" + std::to_string(b) + ", " +
                              std::to_string(b + m) + ") missing or different after sealing");
    }
  }
  return f;
}

using ::mlcd::bench::Median;

nlohmann::json ToJson(const RunFigures& f, size_t rows) {
  return {{"writers", f.writers},
          {"seconds", f.seconds},
          {"rows_per_second", f.rows_per_second},
          {"server_cpu_seconds_per_million_rows", 1e6 * f.server_cpu_seconds / rows},
          {"seal_seconds", f.seal_seconds},
          {"verify_seconds", f.verify_seconds},
          {"size_bytes", f.size_bytes}};
}

// Median figures per W of one mode, printed as a table and returned as JSON.
nlohmann::json Summarise(const char* mode, const std::vector<int>& writer_counts,
                         std::map<int, std::vector<RunFigures>>& runs, size_t rows) {
  std::printf("\n%-10s %8s %14s %24s\n", "mode", "writers", "rows/s", "cpu s/M rows");
  nlohmann::json table = nlohmann::json::array();
  for (int w : writer_counts) {
    std::vector<double> rate, cpu;
    nlohmann::json passes = nlohmann::json::array();
    for (const RunFigures& f : runs[w]) {
      rate.push_back(f.rows_per_second);
      cpu.push_back(1e6 * f.server_cpu_seconds / rows);
      passes.push_back(ToJson(f, rows));
    }
    std::printf("%-10s %8d %14.0f %24.2f\n", mode, w, Median(rate), Median(cpu));
    table.push_back({{"writers", w},
                     {"rows_per_second", Median(rate)},
                     {"server_cpu_seconds_per_million_rows", Median(cpu)},
                     {"passes", passes}});
  }
  return table;
}

int Run(int argc, char** argv) {
  size_t rows = 200000, batch = 1024;
  int l = 8, k = 1000000, repeats = 1;
  bool in_process = false;
  std::vector<int> writer_counts = {1, 2, 4, 8};
  std::string out = "bench/results/labelstore_writers.json";
  CLI::App app{"labelstore_writers_bench: W concurrent WriteLabels streams into one set"};
  app.add_option("--rows", rows, "rows written per W (sample ids 0..rows-1)")
      ->capture_default_str();
  app.add_option("--writers", writer_counts, "writer counts")->delimiter(',');
  app.add_option("--batch", batch, "rows per WriteLabels message")->capture_default_str();
  app.add_option("--l", l, "labels per row")->capture_default_str();
  app.add_option("--k", k, "number of classes")->capture_default_str();
  app.add_option("--repeats", repeats, "passes over the W list")->capture_default_str();
  app.add_flag("--in-process", in_process, "also time the storage layer alone, in this process");
  app.add_option("--out", out, "JSON results file")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // TLS and tokens on for the servers this process starts; this process itself is a service
  // (certificate, no token) acting for the job.
  Status st = testing::EnableTestSecurity();
  SecurityOptions service;
  service.tls = {testing::TestCerts().server.cert, testing::TestCerts().server.key,
                 testing::TestCerts().ca.cert};
  if (st.ok()) st = ConfigureSecurity(service);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
    return 1;
  }
  const Rows data = MakeRows(rows, l, k);
  testing::TempDir dir;
  std::map<int, std::vector<RunFigures>> runs[2];  // gRPC, in-process
  for (int rep = 0; rep < repeats; ++rep) {
    std::vector<int> order = writer_counts;
    if (rep % 2 == 1) std::reverse(order.begin(), order.end());
    for (int w : order) {
      for (int mode = 0; mode < (in_process ? 2 : 1); ++mode) {
        const std::string sub = dir.Sub((mode == 0 ? "grpc_w" : "local_w") + std::to_string(w) +
                                        "r" + std::to_string(rep));
        StatusOr<RunFigures> f =
            mode == 0 ? RunOnce(sub, data, w, batch, k) : InProcessOnce(sub, data, w, batch, k);
        if (!f.ok()) {
          std::fprintf(stderr, "error: W=%d: %s\n", w, f.status().ToString().c_str());
          return 1;
        }
        std::printf(
            "%s W=%d pass %d: %.3f s, %.0f rows/s, cpu %.2f s/M rows; "
            "all %zu rows read back identical after sealing\n",
            mode == 0 ? "gRPC" : "in-process", w, rep, f->seconds, f->rows_per_second,
            1e6 * f->server_cpu_seconds / rows, rows);
        std::fflush(stdout);
        runs[mode][w].push_back(*f);
      }
    }
  }
  nlohmann::json j{{"what",
                    "W concurrent WriteLabels streams into one label set, mTLS + "
                    "tokens, real mlcd-labelstore; every row verified after sealing. "
                    "cpu = the server's (gRPC) or this process's (in-process)"},
                   {"rows", rows},
                   {"batch", batch},
                   {"labels_per_sample", l},
                   {"with_scores", true},
                   {"num_classes", k},
                   {"repeats", repeats},
                   {"cpus", std::thread::hardware_concurrency()}};
  j["grpc"] = Summarise("gRPC", writer_counts, runs[0], rows);
  if (in_process) j["in_process"] = Summarise("in-process", writer_counts, runs[1], rows);
  std::ofstream(out) << j.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace
}  // namespace mlcd

int main(int argc, char** argv) { return mlcd::Run(argc, argv); }
