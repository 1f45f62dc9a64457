// mlcd-labelstore: the label store service (gRPC over an embedded RocksDB).
//
//   mlcd-labelstore [--listen 127.0.0.1:7610] [--metrics-listen 127.0.0.1:7611]
//                   [--data-dir ./.mlcd/labelstore] [--block-cache-mb 512] [--min-free-mb 64]
//
// Exits 0 after SIGTERM/SIGINT (in-flight calls get a grace period, the WAL is synced and
// the database closed), 1 when it cannot start (bad flags, data dir locked or corrupt,
// address in use).
#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/metrics.h"
#include "labelstore/service.h"
#include "labelstore/storage.h"

int main(int argc, char** argv) {
  mlcd::InstallShutdownSignalHandling();
  CLI::App app{
      "mlcd-labelstore: stores label sets (per-sample top-l cluster ids) in RocksDB and serves\n"
      "batched reads to training workers over gRPC (mlcd.v1.LabelStore).",
      "mlcd-labelstore"};
  mlcd::ServiceFlags flags;
  mlcd::AddServiceFlags(app, &flags, "127.0.0.1:" + std::to_string(mlcd::kDefaultLabelstorePort),
                        "127.0.0.1:" + std::to_string(mlcd::kDefaultLabelstorePort + 1),
                        "./.mlcd/labelstore");
  size_t block_cache_mb = 512;
  app.add_option(
         "--block-cache-mb", block_cache_mb,
         "RocksDB block cache in MiB; size it to hold the sets being trained on (about 4*n*l bytes "
         "per set, twice that with scores)")
      ->check(CLI::Range(size_t{8}, size_t{1} << 20))
      ->capture_default_str();
  uint64_t min_free_mb = mlcd::kLabelStoreMinFreeBytes >> 20;
  app.add_option("--min-free-mb", min_free_mb,
                 "space reserve on the --data-dir file system: below it writes are refused "
                 "(UNAVAILABLE, health NOT_SERVING) while reads go on, and they resume by "
                 "themselves once space is freed; 0 = none")
      ->check(CLI::Range(uint64_t{0}, mlcd::kMaxMinFreeMb))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!mlcd::ApplyLogFlags(flags, "labelstore")) return 1;

  mlcd::labelstore::LabelStorageOptions options;
  options.data_dir = flags.data_dir;
  options.block_cache_bytes = block_cache_mb << 20;
  options.min_free_bytes = min_free_mb << 20;
  auto storage = mlcd::labelstore::LabelStorage::Open(options);
  if (!storage.ok()) {
    MLCD_LOG(ERROR) << storage.status().ToString();
    return 1;
  }
  mlcd::MetricsServer metrics;
  mlcd::labelstore::LabelStoreService service(storage->get(), metrics.registry());
  if (mlcd::Status s = metrics.Serve(flags.metrics_listen); !s.ok()) {
    MLCD_LOG(ERROR) << s.ToString();
    return 1;
  }
  mlcd::GrpcServerRunner runner("mlcd-labelstore");
  runner.AddService(&service);
  runner.SetHealthListen(flags.health_listen);
  if (mlcd::Status s = runner.Start(flags.listen); !s.ok()) {
    MLCD_LOG(ERROR) << s.ToString();
    return 1;
  }
  // Health follows the storage: NOT_SERVING while writes fail (disk full), SERVING again once
  // the database has resumed on its own.
  std::atomic<bool> stopping{false};
  std::thread health_watch([&] {
    bool serving = true;
    while (!stopping.load()) {
      const mlcd::Status health = (*storage)->Health();
      if (health.ok() != serving && !mlcd::ShutdownRequested()) {
        if (auto* h = runner.server()->GetHealthCheckService()) h->SetServingStatus(health.ok());
        serving = health.ok();
        MLCD_LOG(WARNING) << "health: "
                          << (serving ? "SERVING" : "NOT_SERVING: " + health.message());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  runner.WaitForShutdown();
  stopping.store(true);
  health_watch.join();
  storage->reset();  // syncs the WAL and closes the database
  MLCD_LOG(INFO) << "label store closed cleanly";
  return 0;
}
