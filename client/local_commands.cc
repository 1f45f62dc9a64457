// mlcdctl local up|down|status: the embedded local cluster. One command starts a whole
// cluster on loopback (mlcd-labelstore, mlcd-clusterd, mlcd-coordinator and N `mlcd-worker
// agent` slots as child processes, state and logs under one folder), supervises it
// (restarting a process that dies, as Kubernetes would) and stops it cleanly: SIGTERM to all
// (workers first, so they stop their training children), wait, SIGKILL stragglers.
//
//   mlcdctl local up --workers 2 --dir .mlcd/local             # foreground; Ctrl-C stops it
//   mlcdctl local up --workers 2 --dir .mlcd/local --detach    # returns once it is ready
//   mlcdctl local status --dir .mlcd/local
//   mlcdctl local down --dir .mlcd/local
//
// Layout of --dir: local.pid (the supervisor), cluster.json (addresses, once ready), env
// (export MLCD_COORDINATOR=..., MLCD_TLS_*, MLCD_TOKEN_FILE for shells), tls/ (CA, the
// services' certificate, tokens: local_security.h; not with --insecure),
// logs/<process>.log, labelstore/, clusterd/, coordinator/ (its RocksDB, features, per-job
// files and checkpoints), workers/w<i>/.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "client/cli.h"
#include "client/local_security.h"
#include "clients/coordinator_client.h"
#include "common/data_roots.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mlcd/v1/coordinator.grpc.pb.h"

namespace mlcd::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct LocalOptions {
  int workers = 2;
  std::string dir = ".mlcd/local";
  std::string ports = "default";
  std::string bin_dir;
  bool detach = false;
  double ready_timeout = 90;
  int max_restarts = 5;
  std::string log_level = "info";
  double stop_timeout = 30;
  // --data-root of clusterd, the coordinator and the worker agents; none given = the working
  // directory `local up` runs in and /usr/share/datasets. The cluster's --dir is private
  // except its output folders (LocalCoordinatorOutputDirs), which are always roots.
  std::vector<std::string> data_roots;
  bool insecure = false;
};

// The folders of the local coordinator's --data-dir (`dir`/coordinator) that clusterd and the
// workers read and write for its jobs: the per-job folders (coordinator/job_entry.cc), the
// generated round-0 features and the dataset indexes it builds (phase_runner.cc,
// dataset_checks.cc), the workers' baseline cache (gang_scheduler.cc), and the users' output
// areas (users/, clusterd --output-root; clusterd/output_area.h). Its database (db/) and
// backups/ are not among them.
std::vector<std::string> LocalCoordinatorOutputDirs(const std::string& dir) {
  std::vector<std::string> dirs;
  for (const char* sub : {"jobs", "features", "datasets", "baselines", "users"})
    dirs.push_back(dir + "/coordinator/" + sub);
  return dirs;
}

struct Proc {
  std::string name;
  std::string binary;
  std::vector<std::string> args;
  std::string log;
  pid_t pid = -1;
  int restarts = 0;
  bool worker = false;
  // Environment entries added to the inherited environment.
  std::vector<std::string> env{};
};

std::string SelfDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

std::string AbsolutePath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  return path;
}

// True when `pid` is a live (non-zombie) process.
bool ProcessAlive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  auto stat = ReadFileToString("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  size_t paren = stat->rfind(')');
  return !(paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z');
}

pid_t ReadPid(const std::string& dir) {
  auto text = ReadFileToString(dir + "/local.pid");
  if (!text.ok()) return -1;
  return static_cast<pid_t>(std::atol(text->c_str()));
}

std::string LogTail(const std::string& path, size_t bytes = 1500) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return "";
  return text->size() > bytes ? "..." + text->substr(text->size() - bytes) : *text;
}

Status Healthy(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(address));
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(2)));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  Status s = FromGrpcStatus(stub->Check(&context, request, &response));
  if (!s.ok()) return s;
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return Status::Unavailable(address + " is not serving yet");
  }
  return Status::Ok();
}

class LocalCluster {
 public:
  explicit LocalCluster(LocalOptions options) : opt_(std::move(options)) {}

  // Starts everything and waits until it is ready; writes cluster.json and env.
  Status Up();
  // Restarts processes that die until SIGTERM/SIGINT; then Down().
  void Supervise();
  // SIGTERM to all (workers first), wait, SIGKILL stragglers.
  void Down();

 private:
  Status StartProc(Proc* p);
  std::string Port(int default_port);
  Status WaitReady();

  LocalOptions opt_;
  std::vector<Proc> procs_;
  std::string coordinator_, labelstore_, clusterd_;
  std::set<int> used_ports_;
  nlohmann::json info_;
  LocalSecurity security_;
};

std::string LocalCluster::Port(int default_port) {
  int port = default_port;
  if (opt_.ports == "auto") {
    // A port just released can come back from the next pick: keep them distinct.
    for (int i = 0; i < 100 && (port = PickFreePort(), used_ports_.count(port)); ++i) {
    }
  }
  used_ports_.insert(port);
  return "127.0.0.1:" + std::to_string(port);
}

Status LocalCluster::StartProc(Proc* p) {
  SpawnOptions spawn;
  spawn.argv = {p->binary};
  spawn.argv.insert(spawn.argv.end(), p->args.begin(), p->args.end());
  spawn.log_path = p->log;
  spawn.stdin_from_dev_null = true;
  spawn.parent_death_signal = SIGTERM;
  spawn.clear_signal_mask = true;
  spawn.default_sigpipe = true;
  spawn.set_env = p->env;
  MLCD_ASSIGN_OR_RETURN(p->pid, Spawn(spawn));
  return Status::Ok();
}

Status LocalCluster::Up() {
  if (opt_.workers < 0 || opt_.workers > 64)
    return Status::InvalidArgument("--workers must be in [0, 64]");
  MLCD_RETURN_IF_ERROR(MakeDirs(opt_.dir + "/logs"));
  opt_.dir = AbsolutePath(opt_.dir);
  pid_t running = ReadPid(opt_.dir);
  if (running > 0 && running != ::getpid() && ProcessAlive(running)) {
    return Status::AlreadyExists("a local cluster is already running from " + opt_.dir + " (pid " +
                                 std::to_string(running) +
                                 "); stop it with `mlcdctl local down --dir " + opt_.dir + "`");
  }
  ::unlink((opt_.dir + "/cluster.json").c_str());
  MLCD_RETURN_IF_ERROR(
      WriteFileAtomically(opt_.dir + "/local.pid", std::to_string(::getpid()) + "\n"));
  MLCD_ASSIGN_OR_RETURN(security_, PrepareLocalSecurity(opt_.dir, opt_.insecure));
  const std::string bin = opt_.bin_dir.empty() ? SelfDir() : AbsolutePath(opt_.bin_dir);
  for (const char* b : {"mlcd-labelstore", "mlcd-clusterd", "mlcd-coordinator", "mlcd-worker"}) {
    if (::access((bin + "/" + b).c_str(), X_OK) != 0) {
      return Status::NotFound(
          bin + "/" + b + " is not an executable; build it (scripts/setup.sh) or pass --bin-dir");
    }
  }
  labelstore_ = Port(kDefaultLabelstorePort);
  clusterd_ = Port(kDefaultClusterdPort);
  coordinator_ = Port(kDefaultCoordinatorPort);
  const std::string labelstore_metrics = Port(kDefaultLabelstorePort + 1);
  const std::string clusterd_metrics = Port(kDefaultClusterdPort + 1);
  const std::string coordinator_metrics = Port(kDefaultCoordinatorPort + 1);
  const std::string logs = opt_.dir + "/logs/";
  std::vector<std::string> roots = opt_.data_roots;
  if (roots.empty()) {
    roots = {AbsolutePath(".")};
    if (IsDirectory(kSharedDatasetsDir)) roots.push_back(kSharedDatasetsDir);
  }
  // The coordinator's output folders (centroids, checkpoints, features, indexes) and the
  // users' output areas are roots of every service whatever --data-root says. The cluster's
  // folder itself (databases, TLS material, tokens, logs) is private to clusterd, the
  // coordinator and the worker agents even where a root holds it (the working directory does,
  // by default): only those output folders inside it are open (common/data_roots.h, the
  // deepest folder decides).
  for (const std::string& out : LocalCoordinatorOutputDirs(opt_.dir)) {
    MLCD_RETURN_IF_ERROR(MakeDirs(out));
    roots.push_back(out);
  }
  std::vector<std::string> root_flags;
  for (const auto& r : roots) root_flags.insert(root_flags.end(), {"--data-root", AbsolutePath(r)});
  root_flags.insert(root_flags.end(), {"--private-dir", AbsolutePath(opt_.dir)});
  procs_.push_back({"labelstore",
                    bin + "/mlcd-labelstore",
                    {"--listen", labelstore_, "--metrics-listen", labelstore_metrics, "--data-dir",
                     opt_.dir + "/labelstore", "--log-level", opt_.log_level},
                    logs + "labelstore.log"});
  procs_.push_back({"clusterd",
                    bin + "/mlcd-clusterd",
                    {"--listen", clusterd_, "--metrics-listen", clusterd_metrics, "--data-dir",
                     opt_.dir + "/clusterd", "--labelstore", labelstore_, "--log-level",
                     opt_.log_level, "--output-root", opt_.dir + "/coordinator"},
                    logs + "clusterd.log"});
  procs_.back().args.insert(procs_.back().args.end(), root_flags.begin(), root_flags.end());
  procs_.push_back({"coordinator",
                    bin + "/mlcd-coordinator",
                    {"--listen", coordinator_, "--metrics-listen", coordinator_metrics,
                     "--data-dir", opt_.dir + "/coordinator", "--labelstore", labelstore_,
                     "--clusterd", clusterd_, "--log-level", opt_.log_level},
                    logs + "coordinator.log"});
  procs_.back().args.insert(procs_.back().args.end(), root_flags.begin(), root_flags.end());
  for (auto& p : procs_) p.env = security_.ServiceEnv();
  info_ = nlohmann::json::object();
  info_["dir"] = opt_.dir;
  info_["tls"] = security_.on;
  info_["coordinator"] = coordinator_;
  info_["labelstore"] = labelstore_;
  info_["clusterd"] = clusterd_;
  info_["metrics"] = {{"coordinator", coordinator_metrics},
                      {"labelstore", labelstore_metrics},
                      {"clusterd", clusterd_metrics}};
  info_["workers"] = nlohmann::json::array();
  for (int i = 0; i < opt_.workers; ++i) {
    const std::string name = "local-w" + std::to_string(i);
    const std::string status = Port(kDefaultWorkerPort + 2 * i);
    // The agent's /metrics (always up, the train child's merged in) and the child's own.
    const std::string metrics = Port(kDefaultWorkerPort + 2 * i + 1);
    const std::string child_metrics = Port(kDefaultWorkerPort + 200 + i);
    Proc p{
        name,
        bin + "/mlcd-worker",
        {"agent", "--coordinator", coordinator_, "--name", name, "--host", "127.0.0.1", "--listen",
         status, "--data-dir", opt_.dir + "/workers/w" + std::to_string(i), "--metrics-listen",
         metrics, "--child-metrics-listen", child_metrics, "--log-level", opt_.log_level},
        logs + name + ".log"};
    // The same roots and private folder as clusterd and the coordinator: the children
    // confine to them, so no assignment reaches the cluster's tls/ or db/ either.
    p.args.insert(p.args.end(), root_flags.begin(), root_flags.end());
    p.worker = true;
    p.env = security_.WorkerEnv();
    procs_.push_back(p);
    info_["workers"].push_back({{"name", name},
                                {"status", status},
                                {"metrics", metrics},
                                {"train_metrics", child_metrics},
                                {"log", logs + name + ".log"}});
  }
  for (auto& p : procs_) MLCD_RETURN_IF_ERROR(StartProc(&p));
  Status ready = WaitReady();
  if (!ready.ok()) return ready;
  info_["pid"] = ::getpid();
  nlohmann::json pids = nlohmann::json::object();
  for (const auto& p : procs_) pids[p.name] = p.pid;
  info_["pids"] = pids;  // at start; a restarted process gets a new one
  info_["ready"] = true;
  info_["logs"] = opt_.dir + "/logs";
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(opt_.dir + "/cluster.json", info_.dump(2) + "\n"));
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(
      opt_.dir + "/env",
      "export MLCD_COORDINATOR=" + coordinator_ + "\nexport MLCD_LABELSTORE=" + labelstore_ +
          "\nexport MLCD_CLUSTERD=" + clusterd_ + "\n" + security_.EnvExports()));
  return Status::Ok();
}

Status LocalCluster::WaitReady() {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt_.ready_timeout * 1000));
  auto exited = [&]() -> Status {
    for (auto& p : procs_) {
      int status = 0;
      if (p.pid > 0 && ::waitpid(p.pid, &status, WNOHANG) == p.pid) {
        p.pid = -1;
        return Status::Unavailable(p.name + " exited while starting; its log (" + p.log +
                                   ") ends:\n" + LogTail(p.log));
      }
    }
    return Status::Ok();
  };
  for (const auto& [name, address] : std::vector<std::pair<std::string, std::string>>{
           {"labelstore", labelstore_}, {"clusterd", clusterd_}, {"coordinator", coordinator_}}) {
    while (true) {
      MLCD_RETURN_IF_ERROR(exited());
      if (Healthy(address).ok()) break;
      if (Clock::now() > deadline)
        return Status::DeadlineExceeded(name + " at " + address + " did not become healthy");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  auto stub = coordinator::NewCoordinatorStub(coordinator_);
  while (true) {
    MLCD_RETURN_IF_ERROR(exited());
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(2)));
    v1::ListWorkersResponse response;
    if (stub->ListWorkers(&context, v1::ListWorkersRequest(), &response).ok()) {
      int idle = 0;
      for (const auto& w : response.workers()) {
        if (w.worker_id().rfind("local-w", 0) == 0 && w.state() == v1::WORKER_STATE_IDLE) ++idle;
      }
      if (idle >= opt_.workers) return Status::Ok();
    }
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded("the " + std::to_string(opt_.workers) +
                                      " workers did not all register within " +
                                      std::to_string(static_cast<int>(opt_.ready_timeout)) +
                                      " s; see " + opt_.dir + "/logs/local-w*.log");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void LocalCluster::Supervise() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  while (true) {
    struct timespec timeout = {0, 300 * 1000 * 1000};
    int sig = ::sigtimedwait(&set, nullptr, &timeout);
    if (sig > 0) {
      std::printf("received %s; stopping the local cluster\n",
                  sig == SIGTERM ? "SIGTERM" : "SIGINT");
      std::fflush(stdout);
      break;
    }
    for (auto& p : procs_) {
      int status = 0;
      if (p.pid <= 0 || ::waitpid(p.pid, &status, WNOHANG) != p.pid) continue;
      std::string how = WIFEXITED(status)     ? "exit code " + std::to_string(WEXITSTATUS(status))
                        : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                              : "unknown";
      p.pid = -1;
      if (p.restarts >= opt_.max_restarts) {
        std::printf("%s died (%s); restarted %d times already, leaving it down (log: %s)\n",
                    p.name.c_str(), how.c_str(), p.restarts, p.log.c_str());
        std::fflush(stdout);
        continue;
      }
      ++p.restarts;
      std::printf("%s died (%s); restarting it (%d/%d; log: %s)\n", p.name.c_str(), how.c_str(),
                  p.restarts, opt_.max_restarts, p.log.c_str());
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      Status s = StartProc(&p);
      if (!s.ok()) std::printf("cannot restart %s: %s\n", p.name.c_str(), s.ToString().c_str());
    }
  }
  Down();
}

void LocalCluster::Down() {
  auto stop_group = [&](bool workers) {
    for (auto& p : procs_) {
      if (p.pid > 0 && p.worker == workers) ::kill(p.pid, SIGTERM);
    }
    const auto deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt_.stop_timeout * 1000));
    while (Clock::now() < deadline) {
      bool any = false;
      for (auto& p : procs_) {
        if (p.pid <= 0 || p.worker != workers) continue;
        int status = 0;
        if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
          p.pid = -1;
        } else {
          any = true;
        }
      }
      if (!any) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (auto& p : procs_) {
      if (p.pid > 0 && p.worker == workers) {
        std::printf("%s did not stop within %.0f s; SIGKILL\n", p.name.c_str(), opt_.stop_timeout);
        ::kill(p.pid, SIGKILL);
        int status = 0;
        ::waitpid(p.pid, &status, 0);
        p.pid = -1;
      }
    }
  };
  stop_group(true);   // workers stop their training children first
  stop_group(false);  // then the services
  ::unlink((opt_.dir + "/cluster.json").c_str());
  if (ReadPid(opt_.dir) == ::getpid()) ::unlink((opt_.dir + "/local.pid").c_str());
  std::printf("local cluster stopped (logs in %s/logs)\n", opt_.dir.c_str());
  std::fflush(stdout);
}

void PrintUp(const nlohmann::json& info, bool detached) {
  std::printf("local cluster ready%s (pid %d): %zu workers\n", detached ? " in the background" : "",
              info.value("pid", 0), info["workers"].size());
  std::printf("  coordinator  %s\n  labelstore   %s\n  clusterd     %s\n",
              info.value("coordinator", "").c_str(), info.value("labelstore", "").c_str(),
              info.value("clusterd", "").c_str());
  std::printf("  metrics      coordinator %s, labelstore %s, clusterd %s\n",
              info["metrics"].value("coordinator", "").c_str(),
              info["metrics"].value("labelstore", "").c_str(),
              info["metrics"].value("clusterd", "").c_str());
  std::printf("  state, logs  %s (source %s/env for MLCD_COORDINATOR etc.)\n",
              info.value("dir", "").c_str(), info.value("dir", "").c_str());
  std::printf("  security     %s\n", info.value("tls", false)
                                         ? "mTLS + tokens (certificates and tokens in <dir>/tls; "
                                           "the env file sets MLCD_TLS_* and MLCD_TOKEN_FILE)"
                                         : "off (--insecure: plaintext on loopback, no tokens)");
  std::printf(
      "submit a job:  mlcdctl --coordinator %s submit examples/tiny-test-job.yaml --watch\n",
      info.value("coordinator", "").c_str());
  if (detached) {
    std::printf("stop it:       mlcdctl local down --dir %s\n", info.value("dir", "").c_str());
  } else {
    std::printf("stop it:       Ctrl-C (or mlcdctl local down --dir %s)\n",
                info.value("dir", "").c_str());
  }
  std::fflush(stdout);
}

int RunUp(Context& ctx, LocalOptions opt) {
  if (opt.ports != "default" && opt.ports != "auto") {
    return ctx.Fail(Status::InvalidArgument("--ports must be 'default' or 'auto'"));
  }
  Status made = MakeDirs(opt.dir + "/logs");
  if (!made.ok()) return ctx.Fail(made);
  opt.dir = AbsolutePath(opt.dir);
  pid_t running = ReadPid(opt.dir);
  if (running > 0 && ProcessAlive(running)) {
    return ctx.Fail(Status::AlreadyExists(
        "a local cluster is already running from " + opt.dir + " (pid " + std::to_string(running) +
        "); stop it with `mlcdctl local down --dir " + opt.dir + "`"));
  }
  if (opt.detach) {
    ::unlink((opt.dir + "/cluster.json").c_str());
    const std::string log = opt.dir + "/logs/local.log";
    std::fflush(stdout);
    pid_t pid = ::fork();
    if (pid < 0) return ctx.Fail(Status::Internal(std::string("fork: ") + std::strerror(errno)));
    if (pid == 0) {
      ::setsid();
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) {
        ::dup2(devnull, 0);
        ::close(devnull);
      }
      InstallShutdownSignalHandling();
      LocalCluster cluster(opt);
      Status s = cluster.Up();
      if (!s.ok()) {
        std::printf("error: %s\n", s.ToString().c_str());
        cluster.Down();
        _exit(ExitCodeFor(s));
      }
      std::printf("ready\n");
      std::fflush(stdout);
      cluster.Supervise();
      _exit(0);
    }
    // Parent: wait for the supervisor to be ready (cluster.json) or to fail.
    const auto deadline =
        Clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(opt.ready_timeout * 1000 + 30000));
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        std::fprintf(stderr, "error: the local cluster did not start; %s ends:\n%s\n", log.c_str(),
                     LogTail(log).c_str());
        return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : kExitFailure;
      }
      auto text = ReadFileToString(opt.dir + "/cluster.json");
      if (text.ok()) {
        auto info = nlohmann::json::parse(*text, nullptr, false);
        if (!info.is_discarded() && info.value("pid", 0) == pid && info.value("ready", false)) {
          if (ctx.format() == OutputFormat::kJson) {
            std::printf("%s\n", info.dump(2).c_str());
          } else {
            PrintUp(info, true);
          }
          return kExitOk;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid, SIGTERM);
    return ctx.Fail(Status::DeadlineExceeded("the local cluster did not become ready; see " + log));
  }
  InstallShutdownSignalHandling();
  LocalCluster cluster(opt);
  Status s = cluster.Up();
  if (!s.ok()) {
    cluster.Down();
    return ctx.Fail(s);
  }
  auto text = ReadFileToString(opt.dir + "/cluster.json");
  if (text.ok()) {
    auto info = nlohmann::json::parse(*text, nullptr, false);
    if (ctx.format() == OutputFormat::kJson) {
      std::printf("%s\n", info.dump(2).c_str());
    } else {
      PrintUp(info, false);
    }
  }
  cluster.Supervise();
  return kExitOk;
}

int RunDown(Context& ctx, const std::string& dir_flag, double timeout) {
  const std::string dir = AbsolutePath(dir_flag);
  pid_t pid = ReadPid(dir);
  if (pid <= 0 || !ProcessAlive(pid)) {
    std::printf("no local cluster is running from %s\n", dir.c_str());
    return kExitOk;
  }
  ::kill(pid, SIGTERM);
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  while (Clock::now() < deadline) {
    if (!ProcessAlive(pid)) {
      std::printf("local cluster in %s stopped\n", dir.c_str());
      return kExitOk;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);  // its children get SIGTERM through PR_SET_PDEATHSIG
  return ctx.Fail(Status::DeadlineExceeded(
      "the local cluster (pid " + std::to_string(pid) + ") did not stop within " +
      std::to_string(static_cast<int>(timeout)) + " s; killed it"));
}

int RunStatus(Context& ctx, const std::string& dir_flag) {
  const std::string dir = AbsolutePath(dir_flag);
  pid_t pid = ReadPid(dir);
  auto text = ReadFileToString(dir + "/cluster.json");
  if (pid <= 0 || !ProcessAlive(pid) || !text.ok()) {
    return ctx.Fail(Status::NotFound("no local cluster is running from " + dir +
                                     " (start one: mlcdctl local up --dir " + dir_flag + ")"));
  }
  auto info = nlohmann::json::parse(*text, nullptr, false);
  if (info.is_discarded()) return ctx.Fail(Status::DataLoss(dir + "/cluster.json does not parse"));
  if (info.value("tls", false)) {
    Status s = UseLocalSecurity(dir);
    if (!s.ok()) return ctx.Fail(s);
  }
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", info.dump(2).c_str());
    return kExitOk;
  }
  PrintUp(info, true);
  for (const char* service : {"coordinator", "labelstore", "clusterd"}) {
    Status h = Healthy(info.value(service, ""));
    std::printf("  %-12s %s\n", service, h.ok() ? "SERVING" : h.ToString().c_str());
  }
  return kExitOk;
}

CommandRegistration reg(90, [](CLI::App& app, Context& ctx) {
  auto* local = app.add_subcommand("local",
                                   "Run a whole cluster on this machine (loopback): label store, "
                                   "clusterd, coordinator and N worker\n"
                                   "agents as child processes, state and logs under one folder.");
  local->require_subcommand(1);
  {
    auto opt = std::make_shared<LocalOptions>();
    auto* up = local->add_subcommand(
        "up",
        "Start the local cluster and keep it running in the foreground (Ctrl-C stops it cleanly), "
        "or in\n"
        "the background with --detach. Default ports are the services' defaults (coordinator 7600, "
        "label\n"
        "store 7610, clusterd 7620, workers 7630+), so mlcdctl needs no address flags.");
    up->add_option("--workers", opt->workers, "worker agents to start")->capture_default_str();
    up->add_option("--dir", opt->dir, "folder for state and logs")->capture_default_str();
    up->add_option("--ports", opt->ports,
                   "'default' (the services' default ports) or 'auto' (free ports)")
        ->capture_default_str();
    up->add_option("--bin-dir", opt->bin_dir,
                   "where the mlcd-* executables are (default: next to mlcdctl)");
    up->add_flag("--detach,-d", opt->detach,
                 "run in the background; return once the cluster is ready");
    up->add_option("--ready-timeout", opt->ready_timeout,
                   "seconds to wait for every process to be ready")
        ->capture_default_str();
    up->add_option("--max-restarts", opt->max_restarts, "restarts of a process that dies, each")
        ->capture_default_str();
    up->add_option("--data-root", opt->data_roots,
                   "directory job specs may name paths under, given to clusterd, the coordinator "
                   "and the worker agents (repeatable; default: the working directory and "
                   "/usr/share/datasets). --dir itself is never a data root: only its output "
                   "folders (coordinator/jobs, features, datasets, baselines, users) are");
    up->add_option("--log-level", opt->log_level, "log level of the services")
        ->capture_default_str();
    up->add_flag("--insecure", opt->insecure,
                 "no TLS and no tokens (by default the cluster makes a CA, certificates and "
                 "tokens under --dir/tls with openssl; `source --dir/env` to use them)");
    up->callback([&ctx, opt] { ctx.exit_code = RunUp(ctx, *opt); });
  }
  {
    auto dir = std::make_shared<std::string>(".mlcd/local");
    auto timeout = std::make_shared<double>(60);
    auto* down =
        local->add_subcommand("down",
                              "Stop the local cluster running from --dir (SIGTERM to all, wait, "
                              "SIGKILL stragglers).");
    down->add_option("--dir", *dir, "folder of the cluster")->capture_default_str();
    down->add_option("--stop-timeout", *timeout, "seconds to wait before killing")
        ->capture_default_str();
    down->callback([&ctx, dir, timeout] { ctx.exit_code = RunDown(ctx, *dir, *timeout); });
  }
  {
    auto dir = std::make_shared<std::string>(".mlcd/local");
    auto* status = local->add_subcommand(
        "status", "Show the addresses and health of the local cluster in --dir.");
    status->add_option("--dir", *dir, "folder of the cluster")->capture_default_str();
    status->callback([&ctx, dir] { ctx.exit_code = RunStatus(ctx, *dir); });
  }
});

}  // namespace
}  // namespace mlcd::cli
