#include "tests/coordinator/harness.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "clients/coordinator_client.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

// A free loopback port never handed out before in this process: the kernel may give the same
// ephemeral port to two binds in a row once the first is closed, and a cluster of five
// listeners (three services, two metrics ports) then collides with itself.
std::string Loopback() {
  static std::mutex mu;
  static std::set<int> handed_out;
  std::lock_guard<std::mutex> lock(mu);
  int port = PickFreePort();
  for (int tries = 0; tries < 100 && (port == 0 || handed_out.count(port) != 0); ++tries)
    port = PickFreePort();
  handed_out.insert(port);
  return "127.0.0.1:" + std::to_string(port);
}

}  // namespace

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

TestCluster::TestCluster(const TempDir& dir) : dir_(dir.path()) {
  labelstore_address_ = Loopback();
  clusterd_address_ = Loopback();
  coordinator_address_ = Loopback();
  coordinator_metrics_ = Loopback();
  labelstore_metrics_ = Loopback();
  clusterd_metrics_ = Loopback();
  (void)MakeDirs(dir_ + "/logs");
  // TLS (mTLS) and tokens on, as in the local cluster: this process calls as admin, the
  // services by their certificate, the workers with a worker token.
  Status security = EnableTestSecurity();
  if (!security.ok()) ADD_FAILURE() << security.ToString();
  channel_ = MakeChannel(coordinator_address_);
  stub_ = coordinator::NewCoordinatorStub(channel_);
}

TestCluster::~TestCluster() {
  // Close this client's connection first: a server shutting down waits for open connections.
  stub_.reset();
  channel_.reset();
  // Workers first (they stop their training children), then the services.
  for (auto& w : workers_) w->Stop(std::chrono::seconds(10));
  coordinator_.Stop(std::chrono::seconds(10));
  clusterd_.Stop(std::chrono::seconds(10));
  labelstore_.Stop(std::chrono::seconds(10));
}

Status TestCluster::StartLabelstore() {
  MLCD_RETURN_IF_ERROR(labelstore_.Start(BinPath("mlcd-labelstore"),
                                         {"--listen", labelstore_address_, "--metrics-listen",
                                          labelstore_metrics_, "--data-dir", dir_ + "/labelstore"},
                                         dir_ + "/logs/labelstore.log", NoTokenEnv()));
  return WaitForServing(labelstore_address_, std::chrono::seconds(30));
}

Status TestCluster::RestartLabelstore() {
  labelstore_.Signal(SIGKILL);
  labelstore_.Wait(std::chrono::seconds(10));
  return StartLabelstore();
}

Status TestCluster::StartClusterd() {
  MLCD_RETURN_IF_ERROR(
      clusterd_.Start(BinPath("mlcd-clusterd"),
                      {"--listen", clusterd_address_, "--metrics-listen", clusterd_metrics_,
                       "--data-dir", dir_ + "/clusterd", "--labelstore", labelstore_address_,
                       "--data-root", dir_, "--data-root", "/usr/share/datasets",
                       // The deployment docs/hardening.md describes: outputs only in the
                       // callers' areas of the coordinator's folder, its database private.
                       "--output-root", coordinator_data_dir()},
                      dir_ + "/logs/clusterd.log", NoTokenEnv()));
  return WaitForServing(clusterd_address_, std::chrono::seconds(30));
}

Status TestCluster::StartCoordinator(const std::vector<std::string>& extra_flags) {
  std::vector<std::string> args = {"--listen",
                                   coordinator_address_,
                                   "--metrics-listen",
                                   coordinator_metrics_,
                                   "--data-dir",
                                   coordinator_data_dir(),
                                   "--labelstore",
                                   labelstore_address_,
                                   "--clusterd",
                                   clusterd_address_,
                                   "--heartbeat-interval-ms",
                                   "500",
                                   "--data-root",
                                   dir_,
                                   "--data-root",
                                   "/usr/share/datasets"};
  for (const auto& f : extra_flags) args.push_back(f);
  MLCD_RETURN_IF_ERROR(coordinator_.Start(BinPath("mlcd-coordinator"), args,
                                          dir_ + "/logs/coordinator.log", NoTokenEnv()));
  return WaitForServing(coordinator_address_, std::chrono::seconds(30));
}

void TestCluster::KillCoordinator() {
  coordinator_.Signal(SIGKILL);
  coordinator_.Wait(std::chrono::seconds(10));
}

std::string TestCluster::WorkerDataDir(int i) const {
  return dir_ + "/workers/w" + std::to_string(i);
}

Status TestCluster::StartWorker(int i, const std::vector<std::string>& env,
                                const std::vector<std::string>& data_roots,
                                const std::vector<std::string>& private_dirs) {
  while (static_cast<int>(workers_.size()) <= i)
    workers_.push_back(std::make_unique<ChildProcess>());
  std::vector<std::string> worker_env = WorkerTokenEnv();
  worker_env.insert(worker_env.end(), env.begin(), env.end());
  std::vector<std::string> args = {"agent",
                                   "--coordinator",
                                   coordinator_address_,
                                   "--name",
                                   "w" + std::to_string(i),
                                   "--host",
                                   "127.0.0.1",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--data-dir",
                                   WorkerDataDir(i),
                                   "--poll-seconds",
                                   "2"};
  // The roots the coordinator and clusterd have, unless the test narrows them.
  const std::vector<std::string> roots =
      data_roots.empty() ? std::vector<std::string>{dir_, "/usr/share/datasets"} : data_roots;
  for (const auto& r : roots) args.insert(args.end(), {"--data-root", r});
  for (const auto& p : private_dirs) args.insert(args.end(), {"--private-dir", p});
  return workers_[i]->Start(BinPath("mlcd-worker"), args,
                            dir_ + "/logs/w" + std::to_string(i) + ".log", worker_env);
}

Status TestCluster::StartServicesAndWorkers(int n) {
  MLCD_RETURN_IF_ERROR(StartServices());
  for (int i = 0; i < n; ++i) MLCD_RETURN_IF_ERROR(StartWorker(i));
  return WaitForIdleWorkers(n, std::chrono::seconds(30));
}

Status TestCluster::WaitForIdleWorkers(int n, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int idle = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto workers = Workers();
    if (workers.ok()) {
      idle = 0;
      for (const auto& w : workers->workers()) idle += w.state() == v1::WORKER_STATE_IDLE;
      if (idle >= n) return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status::DeadlineExceeded(std::to_string(idle) + " of " + std::to_string(n) +
                                  " workers idle in time");
}

StatusOr<v1::Job> TestCluster::Submit(const std::string& yaml, const std::string& request_id) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::SubmitJobRequest request;
  request.set_spec_yaml(yaml);
  request.set_request_id(request_id);
  v1::Job job;
  Status s = FromGrpcStatus(stub_->SubmitJob(&context, request, &job));
  if (!s.ok()) return s;
  return job;
}

StatusOr<v1::Job> TestCluster::Get(const std::string& id, bool history) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::GetJobRequest request;
  request.set_id(id);
  request.set_include_history(history);
  v1::Job job;
  Status s = FromGrpcStatus(stub_->GetJob(&context, request, &job));
  if (!s.ok()) return s;
  return job;
}

StatusOr<v1::Job> TestCluster::Cancel(const std::string& id) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::CancelJobRequest request;
  request.set_id(id);
  request.set_reason("test");
  v1::Job job;
  Status s = FromGrpcStatus(stub_->CancelJob(&context, request, &job));
  if (!s.ok()) return s;
  return job;
}

StatusOr<v1::ListWorkersResponse> TestCluster::Workers() {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  v1::ListWorkersResponse response;
  Status s = FromGrpcStatus(stub_->ListWorkers(&context, v1::ListWorkersRequest(), &response));
  if (!s.ok()) return s;
  return response;
}

StatusOr<v1::Job> TestCluster::WaitForJob(const std::string& id,
                                          const std::function<bool(const v1::Job&)>& done,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  v1::Job last;
  Status last_error = Status::DeadlineExceeded("no answer");
  while (std::chrono::steady_clock::now() < deadline) {
    auto job = Get(id);
    if (job.ok()) {
      last = *job;
      if (done(last)) return last;
    } else {
      last_error = job.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (last.id().empty()) return last_error;
  return Status::DeadlineExceeded("job " + id + " did not get there in time; last state " +
                                  v1::JobState_Name(last.state()) + ": " + last.message() + " (" +
                                  last.progress().detail() + ")");
}

StatusOr<v1::Job> TestCluster::WaitForState(const std::string& id, v1::JobState state,
                                            std::chrono::milliseconds timeout) {
  return WaitForJob(
      id, [state](const v1::Job& j) { return j.state() == state || IsTerminal(j.state()); },
      timeout);
}

std::string TestCluster::Logs() {
  std::string out;
  auto add = [&out](const std::string& name, const std::string& path) {
    auto text = ReadFileToString(path);
    if (!text.ok()) return;
    std::string t = *text;
    if (t.size() > 6000) t = "..." + t.substr(t.size() - 6000);
    out += "----- " + name + " -----\n" + t + "\n";
  };
  add("coordinator", dir_ + "/logs/coordinator.log");
  add("clusterd", dir_ + "/logs/clusterd.log");
  add("labelstore", dir_ + "/logs/labelstore.log");
  for (size_t i = 0; i < workers_.size(); ++i)
    add("w" + std::to_string(i), dir_ + "/logs/w" + std::to_string(i) + ".log");
  return out;
}

std::string TinyJob::Yaml() const {
  std::string y;
  y += "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata:\n  name: " + name + "\nspec:\n";
  y += "  dataset: {limit: " + std::to_string(limit) + ", augment: false}\n";
  y += "  clustering: {features: " + features +
       (k > 0 ? ", k: " + std::to_string(k) : std::string()) +
       (l > 0 ? ", l: " + std::to_string(l) : std::string()) + ", niter: " + std::to_string(niter) +
       (clustering_fields.empty() ? "" : ", " + clustering_fields) + "}\n";
  y += "  loss: " + loss + "\n";
  y += "  model: {width: 32, depth: 1, heads: 2, embed_dim: 32" +
       (model_fields.empty() ? "" : ", " + model_fields) + "}\n";
  y += "  training:\n";
  y += "    world_size: " + std::to_string(world_size) + "\n";
  y += "    batch_size: " + std::to_string(batch_size) + "\n";
  y += "    epochs_per_round: " + std::to_string(epochs) + "\n";
  y += "    max_steps_per_epoch: " + std::to_string(max_steps_per_epoch) + "\n";
  y += "    rounds: " + std::to_string(rounds) + "\n";
  y += "    threads_per_worker: 1\n";
  y += "    heartbeat_timeout_seconds: " + std::to_string(heartbeat_timeout) + "\n";
  y += "    collective_timeout_seconds: " + std::to_string(collective_timeout) + "\n";
  y += "    max_restarts: " + std::to_string(max_restarts) + "\n";
  y += "    checkpoint_every_steps: " + std::to_string(checkpoint_every_steps) + "\n";
  y += "    seed: 7\n";
  if (!checkpoint_dir.empty()) y += "    checkpoint_dir: '" + checkpoint_dir + "'\n";
  if (label_prefetch_depth > 0)
    y += "    label_prefetch_depth: " + std::to_string(label_prefetch_depth) + "\n";
  if (time_budget_minutes > 0)
    y += "    time_budget_minutes: " + std::to_string(time_budget_minutes) + "\n";
  y += std::string("  evaluation: {enabled: ") + (evaluation ? "true" : "false") +
       ", train_limit: " + std::to_string(eval_train_limit) +
       ", test_limit: " + std::to_string(eval_test_limit) + "}\n";
  y += more_spec;
  return y;
}

TinyJob TinyMclJob() {
  TinyJob spec;
  spec.name = "mcl";
  spec.k = 2;
  spec.l = 0;
  spec.rounds = 2;
  spec.features = "{kind: model}";
  spec.loss = "{variant: infonce, temperature: 0.5}";
  spec.more_spec = "  mcl: {stages: 2}\n";
  return spec;
}

int64_t TinyJob::TotalSteps() const {
  int64_t per_epoch = limit / batch_size;
  if (max_steps_per_epoch > 0) per_epoch = std::min<int64_t>(per_epoch, max_steps_per_epoch);
  return per_epoch * epochs * rounds;
}

std::map<std::string, std::vector<nlohmann::json>> ProgressEvents(const std::string& worker_dir) {
  std::map<std::string, std::vector<nlohmann::json>> out;
  const std::string root = worker_dir + "/assignments";
  DIR* d = ::opendir(root.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::ifstream in(root + "/" + name + "/progress.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded()) out[name].push_back(j);
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace mlcd::testing
