// A whole cluster of real processes on loopback for the coordinator's integration tests:
// mlcd-labelstore, mlcd-clusterd, mlcd-coordinator and `mlcd-worker agent` slots, each a
// child process with its own log, plus helpers to drive the coordinator's gRPC API.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "mlcd/v1/coordinator.grpc.pb.h"
#include "tests/testing/process.h"

namespace mlcd::testing {

class TestCluster {
 public:
  explicit TestCluster(const TempDir& dir);
  ~TestCluster();

  // Services. The coordinator keeps its address and data dir across restarts.
  Status StartLabelstore();
  // SIGKILL, reap and start again on the same address and data dir.
  Status RestartLabelstore();
  Status StartClusterd();
  Status StartCoordinator(const std::vector<std::string>& extra_flags = {});
  Status StartServices() {
    MLCD_RETURN_IF_ERROR(StartLabelstore());
    MLCD_RETURN_IF_ERROR(StartClusterd());
    return StartCoordinator();
  }
  void KillCoordinator();  // SIGKILL and reap
  ChildProcess& coordinator() { return coordinator_; }

  // Worker agents named w<i>, data under <dir>/workers/w<i>; `env` entries ("NAME=value") are
  // added to the environment the agent inherits. `data_roots`: its --data-root flags (empty:
  // those of the coordinator and clusterd, the test's directory and /usr/share/datasets);
  // `private_dirs`: its --private-dir flags.
  Status StartWorker(int i, const std::vector<std::string>& env = {},
                     const std::vector<std::string>& data_roots = {},
                     const std::vector<std::string>& private_dirs = {});
  ChildProcess& worker(int i) { return *workers_.at(i); }
  std::string WorkerDataDir(int i) const;
  // Waits until `n` workers are registered and idle.
  Status WaitForIdleWorkers(int n, std::chrono::milliseconds timeout);
  // The services, then workers 0..n-1 (default flags), waited for until idle (30 s).
  Status StartServicesAndWorkers(int n);

  const std::string& coordinator_address() const { return coordinator_address_; }
  // The services' /metrics addresses (HOST:PORT).
  const std::string& coordinator_metrics() const { return coordinator_metrics_; }
  const std::string& labelstore_metrics() const { return labelstore_metrics_; }
  const std::string& clusterd_metrics() const { return clusterd_metrics_; }
  const std::string& labelstore_address() const { return labelstore_address_; }
  const std::string& clusterd_address() const { return clusterd_address_; }
  std::string coordinator_data_dir() const { return dir_ + "/coordinator"; }
  v1::Coordinator::Stub* stub() { return stub_.get(); }

  // API helpers (10 s deadlines).
  StatusOr<v1::Job> Submit(const std::string& yaml, const std::string& request_id = "");
  StatusOr<v1::Job> Get(const std::string& id, bool history = false);
  StatusOr<v1::Job> Cancel(const std::string& id);
  StatusOr<v1::ListWorkersResponse> Workers();
  // Polls GetJob until `done(job)` or the timeout; returns the last job seen.
  StatusOr<v1::Job> WaitForJob(const std::string& id,
                               const std::function<bool(const v1::Job&)>& done,
                               std::chrono::milliseconds timeout);
  StatusOr<v1::Job> WaitForState(const std::string& id, v1::JobState state,
                                 std::chrono::milliseconds timeout);

  // Every process's log, for failure messages.
  std::string Logs();

 private:
  std::string dir_;
  std::string labelstore_address_, clusterd_address_, coordinator_address_, coordinator_metrics_,
      labelstore_metrics_, clusterd_metrics_;
  ChildProcess labelstore_, clusterd_, coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

// The tiny job of the tests: Fashion-MNIST subset, ViT width 32 depth 1, 2 workers.
struct TinyJob {
  int limit = 384;
  // clustering.k and l; 0 leaves them out of the YAML.
  int k = 16;
  int l = 4;
  int world_size = 2;
  int batch_size = 64;
  int epochs = 2;
  int max_steps_per_epoch = 3;
  int rounds = 1;
  int heartbeat_timeout = 10;
  int collective_timeout = 10;
  int max_restarts = 3;
  int checkpoint_every_steps = 0;
  // training.checkpoint_dir ("" = the job's own folder).
  std::string checkpoint_dir;
  // training.label_prefetch_depth (0 = the default).
  int label_prefetch_depth = 0;
  // training.time_budget_minutes (0 = none; then `epochs` only caps the round).
  double time_budget_minutes = 0;
  bool evaluation = false;
  // Images of the evaluation's train / test splits when it is on.
  int eval_train_limit = 1000;
  int eval_test_limit = 500;
  std::string name = "tiny";
  // More model fields, YAML flow-map entries appended after the tiny model's own (e.g.
  // "layout: clip, activation: quick_gelu").
  std::string model_fields;
  // The round-0 feature source (a YAML flow map) and more clustering fields (flow-map
  // entries, e.g. "engine: gang, seed: 5").
  std::string features = "{kind: pixels}";
  std::string clustering_fields;
  int niter = 4;
  // The loss section (a YAML flow map), and more sections of the spec (YAML lines indented
  // under `spec:`, e.g. "  mcl: {stages: 2}\n").
  std::string loss = "{variant: mlcd, sample_ratio: 0.5}";
  std::string more_spec;
  std::string Yaml() const;
  // Optimizer steps of the whole job.
  int64_t TotalSteps() const;
};

// The tiny job as multistage contrastive learning (spec.mcl): two InfoNCE stages of K = 2
// clusters over its 384 images in batches of 64 (K^N = 4 <= 384 / 64 = 6).
TinyJob TinyMclJob();

bool IsTerminal(v1::JobState state);

// Every progress event of every assignment a worker ran (the progress.jsonl files under
// `worker_dir`/assignments): assignment id -> events.
std::map<std::string, std::vector<nlohmann::json>> ProgressEvents(const std::string& worker_dir);

}  // namespace mlcd::testing
