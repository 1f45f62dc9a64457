// labelstore_bench: read throughput and latency of the label store (not a test).
//
//   build/bin/labelstore_bench [--samples 1000000] [--l 8] [--seconds 2]
//                              [--out bench/results/labelstore.json]
//
// 1. Fills a fresh store (in-process LabelStorage, messages of 65536 rows) with `samples` x l
//    labels, seals it and compacts it, as a sealed set is served.
// 2. In-process: LabelStorage::GetLabels (RocksDB MultiGet over the block layout, decoded into
//    a GetLabelsResponse) at batch sizes 1, 64, 1024, 8192.
// 3. Baseline: the obvious layout, one RocksDB key per sample, read with MultiGet (sorted
//    keys, values copied out) at batch 1024, for scale.
// 4. gRPC: starts the real mlcd-labelstore binary as a child process on a free loopback port
//    over the same data dir, warms its block cache, and times GetLabels calls from one client
//    thread (sync unary calls, one at a time) at the same batch sizes: rows/s, p50, p99, and
//    the server's CPU time per call (from /proc); then two client threads at batch 1024.
// Batches are consecutive slices of a random permutation of the sample ids (as a training
// epoch reads them). Prints a table and writes JSON.
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "bench/process_cpu.h"
#include "clients/labelstore_client.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "common/stopwatch.h"
#include "common/subprocess.h"
#include "labelstore/storage.h"

namespace {

using Clock = std::chrono::steady_clock;
using mlcd::SecondsBetween;
using mlcd::labelstore::LabelStorage;

void Check(const mlcd::Status& s, const char* what) {
  if (!s.ok()) {
    std::cerr << "labelstore_bench: " << what << ": " << s.ToString() << "\n";
    std::exit(1);
  }
}

struct Measurement {
  size_t batch = 0;
  size_t calls = 0;
  double rows_per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double mean_ms = 0;
  // CPU time of the calling thread per call (the in-process figure that load on a shared
  // machine disturbs least).
  double cpu_ms_per_call = 0;
};

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs `call(begin_index, batch)` over consecutive permutation slices for about `seconds`.
template <typename Fn>
Measurement Measure(size_t batch, double seconds, const std::vector<uint64_t>& perm, Fn&& call) {
  Measurement m;
  m.batch = batch;
  std::vector<double> latencies;
  size_t pos = 0;
  const double cpu_start = ThreadCpuSeconds();
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration<double>(seconds);
  Clock::time_point now = start;
  while (now < deadline || latencies.size() < 20) {
    if (pos + batch > perm.size()) pos = 0;
    auto t0 = Clock::now();
    call(perm.data() + pos, batch);
    now = Clock::now();
    latencies.push_back(SecondsBetween(t0, now));
    pos += batch;
  }
  const double total = SecondsBetween(start, now);
  m.calls = latencies.size();
  m.cpu_ms_per_call = 1e3 * (ThreadCpuSeconds() - cpu_start) / static_cast<double>(m.calls);
  m.rows_per_second = static_cast<double>(m.calls * batch) / total;
  m.mean_ms = 1e3 * total / static_cast<double>(m.calls);
  std::sort(latencies.begin(), latencies.end());
  m.p50_ms = 1e3 * latencies[latencies.size() / 2];
  m.p99_ms = 1e3 * latencies[std::min(latencies.size() - 1, latencies.size() * 99 / 100)];
  return m;
}

nlohmann::json ToJson(const Measurement& m) {
  return {{"batch", m.batch},
          {"calls", m.calls},
          {"rows_per_second", m.rows_per_second},
          {"p50_ms", m.p50_ms},
          {"p99_ms", m.p99_ms},
          {"mean_ms", m.mean_ms},
          {"cpu_ms_per_call", m.cpu_ms_per_call}};
}

std::string SelfDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

// The one-key-per-sample layout: key be64(id), value l int32.
Measurement PerKeyBaseline(const std::string& dir, size_t samples, int l,
                           const std::vector<int32_t>& labels, double seconds,
                           const std::vector<uint64_t>& perm, size_t batch) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(512 << 20);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.compression = rocksdb::kNoCompression;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) Check(mlcd::Status::Internal(s.ToString()), "open per-key db");
  std::unique_ptr<rocksdb::DB> db(raw);
  auto key_of = [](uint64_t id, char* out) {
    for (int i = 7; i >= 0; --i, id >>= 8) out[i] = static_cast<char>(id & 0xff);
  };
  for (size_t begin = 0; begin < samples; begin += 65536) {
    rocksdb::WriteBatch wb;
    for (size_t id = begin; id < std::min(samples, begin + 65536); ++id) {
      char key[8];
      key_of(id, key);
      wb.Put(rocksdb::Slice(key, 8),
             rocksdb::Slice(reinterpret_cast<const char*>(&labels[id * l]), 4 * l));
    }
    db->Write(rocksdb::WriteOptions(), &wb);
  }
  db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr);
  std::vector<char> key_bytes;
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> values(batch);
  std::vector<rocksdb::Status> statuses(batch);
  std::vector<int32_t> out(batch * l);
  std::vector<std::pair<uint64_t, uint32_t>> order(batch);
  auto read = [&](const uint64_t* ids, size_t n) {
    for (size_t i = 0; i < n; ++i) order[i] = {ids[i], static_cast<uint32_t>(i)};
    std::sort(order.begin(), order.begin() + n);
    key_bytes.resize(n * 8);
    keys.resize(n);
    for (size_t i = 0; i < n; ++i) {
      key_of(order[i].first, &key_bytes[i * 8]);
      keys[i] = rocksdb::Slice(&key_bytes[i * 8], 8);
    }
    db->MultiGet(rocksdb::ReadOptions(), db->DefaultColumnFamily(), n, keys.data(), values.data(),
                 statuses.data(), true);
    for (size_t i = 0; i < n; ++i) {
      if (statuses[i].ok()) std::memcpy(&out[order[i].second * l], values[i].data(), 4 * l);
      values[i].Reset();
    }
  };
  // Warm the cache, then measure.
  for (size_t begin = 0; begin + batch <= perm.size(); begin += batch)
    read(perm.data() + begin, batch);
  return Measure(batch, seconds, perm, read);
}

class ServerProcess {
 public:
  ~ServerProcess() { Stop(); }
  void Start(const std::string& binary, const std::vector<std::string>& args,
             const std::string& log) {
    mlcd::SpawnOptions spawn;
    spawn.argv = {binary};
    spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
    spawn.log_path = log;
    // posix_spawn reported a program it could not run; a forked child would exit 127 instead.
    const bool runnable = access(binary.c_str(), X_OK) == 0;
    mlcd::StatusOr<pid_t> pid = runnable ? mlcd::Spawn(spawn) : mlcd::Status::NotFound(binary);
    if (!pid.ok()) Check(mlcd::Status::Unavailable("cannot start " + binary), "spawn");
    pid_ = *pid;
  }
  pid_t pid() const { return pid_; }
  // CPU seconds (user + system) the server has used so far.
  double CpuSeconds() const { return mlcd::bench::ProcessCpuSeconds(pid_); }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    mlcd::WaitForExit(pid_);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "labelstore_bench: label store read throughput and latency (in-process and over gRPC)"};
  size_t samples = 1000000;
  int l = 8;
  int k = 100000;
  double seconds = 2.0;
  std::string out = "bench/results/labelstore.json";
  std::string work_dir;
  std::string server_bin = SelfDir() + "/mlcd-labelstore";
  size_t target_block_kb = 128;
  bool baseline = true;
  bool grpc = true;
  std::vector<size_t> batches = {1, 64, 1024, 8192};
  app.add_option("--samples", samples, "sample ids 0..samples-1")->capture_default_str();
  app.add_option("--l", l, "labels per sample")->capture_default_str();
  app.add_option("--k", k, "number of classes")->capture_default_str();
  app.add_option("--seconds", seconds, "measuring time per batch size and mode")
      ->capture_default_str();
  app.add_option("--batches", batches, "batch sizes")->capture_default_str();
  app.add_option("--out", out, "JSON results file")->capture_default_str();
  app.add_option("--work-dir", work_dir,
                 "where to put the databases (default: a fresh dir under /tmp)");
  app.add_option("--server-bin", server_bin, "mlcd-labelstore binary")->capture_default_str();
  app.add_option("--target-block-kb", target_block_kb, "row bytes per storage block (KiB)")
      ->capture_default_str();
  app.add_option("--baseline", baseline, "also measure the one-key-per-sample layout")
      ->capture_default_str();
  app.add_option("--grpc", grpc, "also measure gRPC GetLabels against the real binary")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  bool own_dir = work_dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/labelstore_bench.XXXXXX";
    work_dir = mkdtemp(tmpl);
  }
  const std::string data_dir = work_dir + "/store";
  const std::string set_name = "bench/labels";
  nlohmann::json result;
  result["samples"] = samples;
  result["labels_per_sample"] = l;
  result["num_classes"] = k;
  result["cpus"] = std::thread::hardware_concurrency();

  std::mt19937_64 rng(42);
  std::vector<int32_t> labels(samples * l);
  for (auto& v : labels) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(k));
  std::vector<uint64_t> perm(samples);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  // 1. Fill, seal, compact.
  {
    mlcd::labelstore::LabelStorageOptions options;
    options.data_dir = data_dir;
    options.target_block_bytes = target_block_kb << 10;
    auto storage = LabelStorage::Open(options);
    Check(storage.status(), "open storage");
    mlcd::v1::CreateLabelSetRequest create;
    create.set_name(set_name);
    create.set_num_classes(k);
    create.set_labels_per_sample(l);
    Check((*storage)->Create(create).status(), "create");
    auto t0 = Clock::now();
    mlcd::v1::WriteLabelsRequest message;
    for (size_t begin = 0; begin < samples; begin += 65536) {
      size_t end = std::min(samples, begin + 65536);
      message.Clear();
      for (size_t id = begin; id < end; ++id) message.add_sample_ids(id);
      message.mutable_labels()->Add(labels.data() + begin * l, labels.data() + end * l);
      Check((*storage)->Write(set_name, message).status(), "write");
    }
    Check((*storage)->SyncWal(), "sync");
    auto t1 = Clock::now();
    Check((*storage)->Seal(set_name, false).status(), "seal");
    (*storage)->WaitForBackgroundWork();
    Check((*storage)->CompactAll(), "compact");
    auto t2 = Clock::now();
    auto block_rows = (*storage)->BlockRows(set_name);
    result["fill_rows_per_second"] = samples / SecondsBetween(t0, t1);
    result["seal_compact_seconds"] = SecondsBetween(t1, t2);
    result["block_rows"] = *block_rows;
    auto info = (*storage)->Describe(set_name);
    result["size_bytes"] = info->size_bytes();
    std::printf(
        "filled %zu x %d labels in-process: %.0f rows/s; seal+compact %.2f s; %d rows per block; "
        "%.1f MiB on disk\n",
        samples, l, samples / SecondsBetween(t0, t1), SecondsBetween(t1, t2), *block_rows,
        info->size_bytes() / 1048576.0);

    // 2. In-process reads.
    mlcd::v1::GetLabelsResponse response;
    auto read = [&](const uint64_t* ids, size_t n) {
      Check((*storage)->GetLabels(set_name, ids, n, false, &response), "in-process GetLabels");
    };
    for (size_t begin = 0; begin + 1024 <= perm.size(); begin += 1024)
      read(perm.data() + begin, 1024);  // warm
    // Spot check against the source.
    read(perm.data(), 1024);
    for (size_t i = 0; i < 1024; ++i) {
      if (std::memcmp(response.labels().data() + i * l, labels.data() + perm[i] * l, 4 * l) != 0) {
        Check(mlcd::Status::DataLoss("row mismatch in-process"), "verify");
      }
    }
    std::printf("\n%-28s %8s %12s %10s %10s %12s\n", "mode", "batch", "rows/s", "p50 ms", "p99 ms",
                "cpu ms/call");
    for (size_t batch : batches) {
      Measurement m = Measure(batch, seconds, perm, read);
      result["in_process"].push_back(ToJson(m));
      std::printf("%-28s %8zu %12.0f %10.3f %10.3f %12.3f\n", "in-process MultiGet(blocks)", batch,
                  m.rows_per_second, m.p50_ms, m.p99_ms, m.cpu_ms_per_call);
    }
  }

  // 3. Baseline layout.
  if (baseline) {
    Measurement m = PerKeyBaseline(work_dir + "/per_key", samples, l, labels, seconds, perm, 1024);
    result["per_key_baseline"] = ToJson(m);
    std::printf("%-28s %8zu %12.0f %10.3f %10.3f %12.3f\n", "in-process MultiGet(per-key)", m.batch,
                m.rows_per_second, m.p50_ms, m.p99_ms, m.cpu_ms_per_call);
  }

  // 4. gRPC against the real binary.
  if (grpc) {
    const int port = mlcd::PickFreePort();
    const std::string address = "127.0.0.1:" + std::to_string(port);
    ServerProcess server;
    server.Start(server_bin,
                 {"--listen", address, "--metrics-listen", "", "--data-dir", data_dir,
                  "--log-level", "warning"},
                 work_dir + "/server.log");
    mlcd::labelstore::LabelStoreClient client(address);
    Check(client.WaitUntilReachable(std::chrono::seconds(30)), "server start");
    mlcd::labelstore::LabelBatch batch_out;
    auto read = [&](const uint64_t* ids, size_t n) {
      Check(client.GetLabels(set_name, ids, n, false, &batch_out), "gRPC GetLabels");
    };
    for (size_t begin = 0; begin + 1024 <= perm.size(); begin += 1024)
      read(perm.data() + begin, 1024);  // warm
    read(perm.data(), 1024);
    for (size_t i = 0; i < 1024; ++i) {
      if (std::memcmp(batch_out.row(i), labels.data() + perm[i] * l, 4 * l) != 0) {
        Check(mlcd::Status::DataLoss("row mismatch over gRPC"), "verify");
      }
    }
    for (size_t batch : batches) {
      const double server_cpu_start = server.CpuSeconds();
      Measurement m = Measure(batch, seconds, perm, read);
      const double server_cpu_ms =
          1e3 * (server.CpuSeconds() - server_cpu_start) / static_cast<double>(m.calls);
      auto j = ToJson(m);
      j["server_cpu_ms_per_call"] = server_cpu_ms;
      result["grpc"].push_back(j);
      std::printf("%-28s %8zu %12.0f %10.3f %10.3f %12.3f  (server cpu %.3f ms/call)\n",
                  "gRPC GetLabels (child proc)", batch, m.rows_per_second, m.p50_ms, m.p99_ms,
                  m.cpu_ms_per_call, server_cpu_ms);
    }
    // Two client threads at batch 1024 (e.g. two workers, or one worker with prefetch): total
    // rows/s of both; each thread reads its own half of the permutation.
    {
      const size_t batch = 1024;
      std::vector<Measurement> per_thread(2);
      std::vector<std::thread> threads;
      const double server_cpu_start = server.CpuSeconds();
      for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t] {
          mlcd::labelstore::LabelStoreClient own(address);
          mlcd::labelstore::LabelBatch out;
          std::vector<uint64_t> half(perm.begin() + t * (perm.size() / 2),
                                     perm.begin() + (t + 1) * (perm.size() / 2));
          per_thread[t] = Measure(batch, seconds, half, [&](const uint64_t* ids, size_t n) {
            Check(own.GetLabels(set_name, ids, n, false, &out), "gRPC GetLabels (2 clients)");
          });
        });
      }
      for (auto& t : threads) t.join();
      const double total_rows = per_thread[0].rows_per_second + per_thread[1].rows_per_second;
      const double calls = static_cast<double>(per_thread[0].calls + per_thread[1].calls);
      const double server_cpu_ms = 1e3 * (server.CpuSeconds() - server_cpu_start) / calls;
      result["grpc_two_clients"] = {
          {"batch", batch},
          {"rows_per_second", total_rows},
          {"p50_ms", std::max(per_thread[0].p50_ms, per_thread[1].p50_ms)},
          {"p99_ms", std::max(per_thread[0].p99_ms, per_thread[1].p99_ms)},
          {"server_cpu_ms_per_call", server_cpu_ms}};
      std::printf("%-28s %8zu %12.0f %10.3f %10.3f %12s  (server cpu %.3f ms/call)\n",
                  "gRPC GetLabels, 2 clients", batch, total_rows,
                  std::max(per_thread[0].p50_ms, per_thread[1].p50_ms),
                  std::max(per_thread[0].p99_ms, per_thread[1].p99_ms), "", server_cpu_ms);
    }
    server.Stop();
  }

  // Ratios at 1024.
  for (size_t i = 0; i < batches.size(); ++i) {
    if (batches[i] == 1024 && grpc) {
      double ratio = result["grpc"][i]["rows_per_second"].get<double>() /
                     result["in_process"][i]["rows_per_second"].get<double>();
      result["grpc_over_in_process_at_1024"] = ratio;
      std::printf("\ngRPC / in-process at batch 1024: %.2f\n", ratio);
    }
  }
  std::filesystem::path out_path(out);
  if (out_path.has_parent_path()) std::filesystem::create_directories(out_path.parent_path());
  std::ofstream(out) << result.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  if (own_dir) std::filesystem::remove_all(work_dir);
  return 0;
}
