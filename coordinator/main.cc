// mlcd-coordinator: the job API, the persistent job state machine and the worker gangs.
// See docs/coordinator.md and `mlcd-coordinator --help`.
#include <iostream>

#include "common/data_roots.h"
#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"

int main(int argc, char** argv) {
  mlcd::InstallShutdownSignalHandling();
  CLI::App app{
      "mlcd-coordinator: turns MLCD job specs into clustering rounds and training epochs on gangs "
      "of\n"
      "mlcd-worker agents. Jobs, rounds, epoch commits and worker registrations live in a RocksDB\n"
      "under --data-dir; after a crash the coordinator reloads them, reattaches to running gangs "
      "or\n"
      "restarts them from the last committed checkpoint. API: mlcd.v1.Coordinator (gRPC, health "
      "and\n"
      "reflection on); metrics: mlcd_coordinator_* on --metrics-listen.",
      "mlcd-coordinator"};
  mlcd::ServiceFlags flags;
  mlcd::AddServiceFlags(app, &flags, "127.0.0.1:7600", "127.0.0.1:7601", "./mlcd-coordinator-data");
  mlcd::coordinator::JobManagerOptions options;
  mlcd::AddPeerFlag(app, "labelstore", &options.labelstore_address, "127.0.0.1:7610");
  mlcd::AddPeerFlag(app, "clusterd", &options.clusterd_address, "127.0.0.1:7620");
  app.add_option("--max-watch-streams", options.max_watch_streams,
                 "WatchJob streams open at once, all callers together (each holds a server "
                 "thread); more are RESOURCE_EXHAUSTED")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--max-watch-streams-per-identity", options.max_watch_streams_per_identity,
                 "WatchJob streams one caller identity (token or certificate) may hold open; "
                 "more are RESOURCE_EXHAUSTED")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  mlcd::AddDataRootFlag(app, &options.data_roots,
                        "--data-dir and /usr/share/datasets (where dataset-fashion-mnist lives)");
  mlcd::AddPrivateDirFlag(app, &options.private_dirs);
  uint64_t min_free_mb = mlcd::kCoordinatorMinFreeBytes >> 20;
  app.add_option("--min-free-mb", min_free_mb,
                 "space reserve on the --data-dir file system: below it the coordinator does not "
                 "start, and refuses new jobs and worker registrations (UNAVAILABLE) so the jobs "
                 "already running can still record their progress; 0 = none")
      ->check(CLI::Range(uint64_t{0}, mlcd::kMaxMinFreeMb))
      ->capture_default_str();
  int heartbeat_ms = 1000;
  app.add_option("--heartbeat-interval-ms", heartbeat_ms,
                 "how often workers heartbeat while running an assignment")
      ->check(CLI::Range(50, 60000))
      ->capture_default_str();
  int idle_timeout_s = 30;
  app.add_option("--idle-worker-timeout", idle_timeout_s,
                 "seconds an idle worker may go without polling before it is marked lost")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  int name_lease_s = mlcd::kDefaultWorkerNameLeaseSeconds;
  app.add_option("--worker-name-lease-seconds", name_lease_s,
                 "seconds a dead worker's name stays bound to the identity that registered it; "
                 "another identity registering the name meanwhile is PERMISSION_DENIED")
      ->check(CLI::Range(0, 7 * 24 * 3600))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!mlcd::ApplyLogFlags(flags, "coordinator")) return 2;
  options.data_dir = flags.data_dir;
  options.min_free_bytes = min_free_mb << 20;
  options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  options.idle_worker_timeout = std::chrono::seconds(idle_timeout_s);
  options.worker_name_lease = std::chrono::seconds(name_lease_s);

  mlcd::MetricsServer metrics_server;
  mlcd::coordinator::CoordinatorMetrics metrics(metrics_server.registry());
  auto manager = mlcd::coordinator::JobManager::Open(options, &metrics);
  if (!manager.ok()) {
    // A clean exit (no abort, no core), also on a full disk: the message names the data dir.
    MLCD_LOG(ERROR) << "mlcd-coordinator cannot start: " << manager.status().ToString();
    return 1;
  }
  mlcd::coordinator::CoordinatorService service(manager->get(), &metrics);
  mlcd::GrpcServerRunner runner("mlcd.v1.Coordinator");
  runner.AddService(&service);
  runner.set_max_receive_message_bytes(mlcd::kMaxCoordinatorRequestBytes);
  runner.SetHealthListen(flags.health_listen);
  mlcd::Status s = runner.Start(flags.listen);
  if (!s.ok()) {
    MLCD_LOG(ERROR) << s.ToString();
    return 1;
  }
  s = metrics_server.Serve(flags.metrics_listen);
  if (!s.ok()) {
    MLCD_LOG(ERROR) << s.ToString();
    return 1;
  }
  (*manager)->Start();
  MLCD_LOG(INFO) << "mlcd-coordinator serving on " << flags.listen << " (port " << runner.port()
                 << "), metrics on "
                 << (flags.metrics_listen.empty() ? "(off)" : flags.metrics_listen) << ", data in "
                 << flags.data_dir << ", labelstore " << options.labelstore_address << ", clusterd "
                 << options.clusterd_address;
  int sig = mlcd::WaitForShutdownSignal();
  MLCD_LOG(INFO) << "shutting down (signal " << sig << ")";
  // Wake long polls and watches first so the server's graceful shutdown does not wait on them.
  (*manager)->Shutdown();
  runner.Shutdown();
  MLCD_LOG(INFO) << "stopped";
  return 0;
}
