// `mlcd-worker agent`: the worker slot's long-running process (worker/agent/agent.h).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/file_util.h"
#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/net.h"
#include "common/security.h"
#include "mlcd/v1/worker.grpc.pb.h"
#include "worker/agent/agent.h"
#include "worker/agent/assignment_paths.h"
#include "worker/agent/child_environment.h"
#include "worker/command.h"
#include "worker/command_io.h"

namespace mlcd::worker {
namespace {

class WorkerStatusService final : public v1::Worker::Service {
 public:
  explicit WorkerStatusService(Agent* agent) : agent_(agent) {}
  grpc::Status GetWorkerStatus(grpc::ServerContext* context, const v1::GetWorkerStatusRequest*,
                               v1::WorkerStatus* response) override {
    Principal caller;
    grpc::Status auth = AuthorizeCall(*context, "/mlcd.v1.Worker/GetWorkerStatus", &caller);
    if (!auth.ok()) return auth;
    *response = agent_->Snapshot();
    return grpc::Status::OK;
  }

 private:
  Agent* agent_;
};

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "worker";
  return buf;
}

int RunAgent(AgentOptions options, const std::string& log_level, const SecurityOptions& security) {
  // Handlers, not blocked signals: SIGTERM must be caught on whichever thread it lands
  // (OpenBLAS starts threads before main()); worker/agent/stop_signal.h. SIGHUP asks for the
  // certificates and tokens to be read again (ReloadSecurity, common/security.h).
  InstallStopSignalHandler();
  ::signal(SIGPIPE, SIG_IGN);
  ServiceFlags log_flags;
  log_flags.log_level = log_level;
  log_flags.security = security;
  log_flags.data_dir = options.data_dir;  // the private copy of the TLS material goes there
  if (!ApplyLogFlags(log_flags, "agent " + options.name)) return 2;
  Agent agent(options);
  // The agent's own /metrics, up whether or not a child trains, with the child's merged in.
  MetricsServer metrics_server;
  AgentMetrics agent_metrics(metrics_server.registry());
  auto proxy = std::make_shared<ChildMetricsProxy>();
  if (!options.metrics_listen.empty()) {
    metrics_server.AddCollectable(proxy);
    Status ms = metrics_server.Serve(options.metrics_listen);
    if (!ms.ok()) {
      MLCD_LOG(ERROR) << ms.WithContext("--metrics-listen").ToString();
      return 1;
    }
    agent.SetMetrics(&agent_metrics, proxy.get());
  }
  GrpcServerRunner runner("mlcd.v1.Worker");
  WorkerStatusService service(&agent);
  if (!options.listen.empty()) {
    runner.AddService(&service);
    runner.SetHealthListen(options.health_listen);
    Status s = runner.Start(options.listen);
    if (!s.ok()) {
      MLCD_LOG(ERROR) << s.ToString();
      return 1;
    }
    std::string host;
    int port = 0;
    if (SplitHostPort(options.listen, "--listen", &host, &port).ok()) {
      options.listen = JoinHostPort(host, runner.port());
      agent.SetStatusAddress(options.listen);
    }
  }
  std::string kinds;
  for (auto k : options.kinds) kinds += (kinds.empty() ? "" : ", ") + v1::AssignmentKind_Name(k);
  MLCD_LOG(INFO) << "worker agent " << options.name << " for coordinator " << options.coordinator
                 << " (runs " << kinds << "; status on "
                 << (options.listen.empty() ? "(off)" : options.listen) << ", data in "
                 << options.data_dir << ", data roots " << options.data_roots.Describe()
                 << ", decode memory at most " << options.max_decode_memory_mb << " MiB per child)";
  std::atomic<bool> ran{false};
  std::thread signals([&agent, &ran] {
    while (!ran && !StopSignal()) {
      if (TakeReloadSignal()) {
        MLCD_LOG(INFO) << "received SIGHUP, reloading certificates and tokens";
        ReloadSecurity();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (StopSignal()) {
      MLCD_LOG(INFO) << "received a stop signal; a running training child checkpoints first";
      agent.Stop();
    }
  });
  Status s = agent.Run();
  ran = true;
  signals.join();
  if (!options.listen.empty()) runner.Shutdown(std::chrono::milliseconds(500));
  if (!s.ok() && s.code() != StatusCode::kCancelled) {
    MLCD_LOG(ERROR) << s.ToString();
    return 1;
  }
  MLCD_LOG(INFO) << "stopped";
  return 0;
}

CommandRegistration reg(90, [](CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "agent",
      "Run as a worker slot of the cluster: register with the coordinator, take assignments "
      "(train,\n"
      "embed, eval) and run each as a child `mlcd-worker <command> --assignment FILE`, relaying "
      "its\n"
      "progress as heartbeats; a child is stopped when the coordinator aborts its gang.");
  auto options = std::make_shared<AgentOptions>();
  auto log_level = std::make_shared<std::string>("info");
  AddPeerFlag(*cmd, "coordinator", &options->coordinator, "127.0.0.1:7600");
  cmd->add_option(
      "--name", options->name,
      "stable name of this worker slot (default: the host name); re-registering under the same\n"
      "name replaces the old entry");
  cmd->add_option("--host", options->host, "host the other workers of a gang reach this one at")
      ->capture_default_str();
  cmd->add_option("--listen", options->listen,
                  "where to serve mlcd.v1.Worker status (HOST:PORT, port 0 = any; empty = off)")
      ->capture_default_str();
  cmd->add_option("--health-listen", options->health_listen,
                  "plaintext gRPC health-only address HOST:PORT for probes that cannot speak "
                  "TLS (empty: none)");
  cmd->add_option(
         "--data-dir", options->data_dir,
         "where assignment files go: assignments/<id>/{assignment.json,progress.jsonl,worker.log}")
      ->capture_default_str();
  auto data_roots = std::make_shared<WorkerRootFlags>();
  AddWorkerDataRootFlag(*cmd, data_roots.get(),
                        "its --data-dir and " + std::string(kSharedDatasetsDir) +
                            "; the children get the same roots");
  cmd->add_option("--worker-binary", options->worker_binary,
                  "executable run for assignments (default: this mlcd-worker)");
  cmd->add_option("--metrics-listen", options->metrics_listen,
                  "serve the agent's /metrics on HOST:PORT, all the time, with the running train\n"
                  "child's metrics merged in (the address Prometheus scrapes)");
  cmd->add_option(
      "--child-metrics-listen", options->child_metrics_listen,
      "--metrics-listen given to each train child (with --metrics-listen: a loopback address\n"
      "the agent proxies; without: the address Prometheus scrapes, up only while training)");
  cmd->add_option("--threads", options->cpu_threads,
                  "CPU threads reported as capacity (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--gpus", options->gpus, "GPUs reported as capacity")->capture_default_str();
  cli::AddMaxDecodeMemoryFlag(cmd,
                              [options](const int& mb) { options->max_decode_memory_mb = mb; });
  auto stop_deadline = std::make_shared<int>(kDefaultStopDeadlineSeconds);
  cmd->add_option("--stop-deadline-seconds", *stop_deadline,
                  "on SIGTERM: how long a training child gets to finish its step and checkpoint\n"
                  "before SIGKILL (set it to the pod's terminationGracePeriodSeconds minus ~10)")
      ->envname("MLCD_STOP_DEADLINE_SECONDS")
      ->check(CLI::Range(6, 86400))
      ->capture_default_str();
  cmd->add_option("--poll-seconds", options->poll_seconds, "length of an assignment long poll")
      ->check(CLI::Range(1, 60))
      ->capture_default_str();
  cli::AddLogLevelFlag(cmd, log_level.get());
  // Its status server and its calls to the coordinator and the label store; its children get
  // none of it (worker/agent/child_environment.h).
  auto security = std::make_shared<SecurityOptions>();
  AddSecurityFlags(*cmd, security.get(), /*server=*/true);
  auto withhold = std::make_shared<bool>(true);
  cmd->add_flag("--withhold-files,!--no-withhold-files", *withhold,
                "start children unable to read the agent's key and token files (Landlock; on by\n"
                "default, where the kernel has it; docs/security.md, \"Worker children\")");
  CLI::App* root = &app;
  cmd->callback([options, log_level, security, exit_code, root, stop_deadline, data_roots,
                 withhold] {
    if (options->name.empty()) options->name = HostName();
    // The data dir is a default root, so it must exist first (Run() would make it anyway).
    Status made = MakeDirs(options->data_dir);
    auto roots = made.ok() ? AgentDataRoots(*data_roots, options->data_dir)
                           : StatusOr<DataRoots>(made.WithContext("--data-dir"));
    if (!roots.ok()) {
      std::fprintf(stderr, "error: %s\n", roots.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    options->data_roots = *roots;
    if (*withhold) options->withheld_files = ChildWithheldFiles(*security, options->data_dir);
    options->stop_deadline = std::chrono::seconds(*stop_deadline);
    // The kinds this executable runs follow from its subcommands.
    options->kinds.clear();
    auto has = [root](const char* name) {
      for (CLI::App* sub : root->get_subcommands([](CLI::App*) { return true; })) {
        if (sub->get_name() == name) return true;
      }
      return false;
    };
    if (has("train")) options->kinds.push_back(v1::ASSIGNMENT_KIND_TRAIN);
    if (has("embed")) options->kinds.push_back(v1::ASSIGNMENT_KIND_EXTRACT);
    if (has("eval")) options->kinds.push_back(v1::ASSIGNMENT_KIND_EVALUATE);
    if (has("cluster-gang")) {
      options->kinds.push_back(v1::ASSIGNMENT_KIND_CLUSTER);
      options->kinds.push_back(v1::ASSIGNMENT_KIND_ASSIGN_LABELS);
    }
    if (options->kinds.empty()) {
      std::fprintf(
          stderr,
          "error: this mlcd-worker has none of the train, embed, eval commands an agent runs\n");
      *exit_code = 1;
      return;
    }
    *exit_code = RunAgent(*options, *log_level, *security);
  });
});

}  // namespace
}  // namespace mlcd::worker
