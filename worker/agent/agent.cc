#include "worker/agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "clients/coordinator_client.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "common/withheld_files.h"
#include "worker/agent/child_environment.h"
#include "worker/agent/label_gateway.h"

namespace mlcd::worker {
namespace {

using Clock = std::chrono::steady_clock;

std::string CommandFor(v1::AssignmentKind kind) {
  switch (kind) {
    case v1::ASSIGNMENT_KIND_TRAIN:
      return "train";
    case v1::ASSIGNMENT_KIND_EXTRACT:
      return "embed";
    case v1::ASSIGNMENT_KIND_EVALUATE:
      return "eval";
    case v1::ASSIGNMENT_KIND_CLUSTER:
    case v1::ASSIGNMENT_KIND_ASSIGN_LABELS:
      return "cluster-gang";
    default:
      return "";
  }
}

std::string SafeFileName(const std::string& id) {
  std::string out;
  for (char c : id)
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "assignment" : out;
}

std::string LastLines(const std::string& path, int lines) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return "";
  const std::string& s = *text;
  size_t end = s.size();
  while (end > 0 && s[end - 1] == '\n') --end;
  size_t pos = end;
  for (int i = 0; i < lines && pos > 0; ++i) {
    size_t nl = s.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = 0;
      break;
    }
    pos = nl;
  }
  std::string tail = s.substr(pos, end - pos);
  while (!tail.empty() && tail.front() == '\n') tail.erase(tail.begin());
  if (tail.size() > 2000) tail = "..." + tail.substr(tail.size() - 2000);
  return tail;
}

}  // namespace

Agent::Agent(AgentOptions options) : options_(std::move(options)) {
  channel_ = MakeChannel(options_.coordinator);
  stub_ = coordinator::NewCoordinatorStub(channel_);
  if (options_.worker_binary.empty()) {
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) options_.worker_binary.assign(buf, static_cast<size_t>(n));
  }
  status_.set_name(options_.name);
  status_.set_state("idle");
  status_.set_coordinator(options_.coordinator);
#ifdef MLCD_WITH_NCCL
  status_.set_backend("cuda/nccl");
#else
  status_.set_backend("cpu/gloo");
#endif
}

Agent::~Agent() = default;

void Agent::Stop() {
  stop_ = true;
  MutexLock lock(&poll_mu_);
  if (poll_context_) poll_context_->TryCancel();
}

void Agent::SleepUnlessStopped(std::chrono::milliseconds d) {
  const auto end = Clock::now() + d;
  while (!stop_ && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

v1::WorkerStatus Agent::Snapshot() {
  MutexLock lock(&mu_);
  return status_;
}

Status Agent::Register() {
  v1::RegisterWorkerRequest request;
  request.set_name(options_.name);
  request.set_host(options_.host);
  request.set_rendezvous_port(0);
  request.mutable_capacity()->set_cpu_threads(
      options_.cpu_threads > 0 ? options_.cpu_threads
                               : static_cast<int>(std::thread::hardware_concurrency()));
  request.mutable_capacity()->set_gpus(options_.gpus);
  long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0)
    request.mutable_capacity()->set_memory_bytes(static_cast<int64_t>(pages) * page_size);
  for (auto kind : options_.kinds) request.add_kinds(kind);
  request.set_status_address(options_.listen);
  request.set_metrics_address(options_.metrics_listen.empty() ? options_.child_metrics_listen
                                                              : options_.metrics_listen);
  request.set_version(options_.version);
  int backoff_ms = 200;
  bool logged = false;
  while (!stop_) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(options_.rpc_timeout));
    v1::RegisterWorkerResponse response;
    Status s = FromGrpcStatus(stub_->RegisterWorker(&context, request, &response));
    if (s.ok()) {
      worker_id_ = response.worker_id();
      heartbeat_interval_ms_ = response.heartbeat_interval_ms() > 0
                                   ? response.heartbeat_interval_ms()
                                   : 1000 * std::max(1, response.heartbeat_interval_seconds());
      MutexLock lock(&mu_);
      status_.set_worker_id(worker_id_);
      MLCD_LOG(INFO) << "registered with " << options_.coordinator << " as " << worker_id_;
      return Status::Ok();
    }
    if (s.code() == StatusCode::kInvalidArgument)
      return s.WithContext("registering with " + options_.coordinator);
    if (!logged) {
      MLCD_LOG(WARNING) << "cannot register with " << options_.coordinator << " yet ("
                        << s.ToString() << "); retrying";
      logged = true;
    }
    SleepUnlessStopped(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
  return Status::Cancelled("stopped");
}

void Agent::Deregister(const std::string& reason) {
  if (worker_id_.empty()) return;
  v1::DeregisterWorkerRequest request;
  request.set_worker_id(worker_id_);
  request.set_reason(reason);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(options_.rpc_timeout));
  v1::DeregisterWorkerResponse response;
  Status s = FromGrpcStatus(stub_->DeregisterWorker(&context, request, &response));
  if (s.ok()) {
    MLCD_LOG(INFO) << "deregistered from " << options_.coordinator;
  } else {
    MLCD_LOG(WARNING) << "could not deregister (" << s.ToString()
                      << "); the coordinator will mark this worker lost";
  }
}

Status Agent::Run() {
  if (options_.name.empty()) return Status::InvalidArgument("--name is required");
  MLCD_RETURN_IF_ERROR(MakeDirs(options_.data_dir + "/assignments"));
  MLCD_ASSIGN_OR_RETURN(std::string gateway_socket, DefaultGatewaySocket(options_.data_dir));
  MLCD_ASSIGN_OR_RETURN(gateway_, LabelGateway::Start(gateway_socket));
  if (!options_.withheld_files.empty()) {
    const int abi = LandlockAbi();
    withhold_files_ = abi >= kWithheldFilesMinLandlockAbi;
    if (!withhold_files_) {
      MLCD_LOG(WARNING) << "this kernel offers Landlock ABI " << abi
                        << " (needed: " << kWithheldFilesMinLandlockAbi
                        << "): children run without the agent's credentials in their "
                           "environment but could read its key and token files from disk";
    }
  }
  MLCD_RETURN_IF_ERROR(Register());
  int backoff_ms = 200;
  while (!stop_) {
    v1::GetAssignmentRequest request;
    request.set_worker_id(worker_id_);
    request.set_wait_seconds(options_.poll_seconds);
    // A port free right now: if this poll makes us rank 0, the gang's TCPStore goes there.
    request.set_rendezvous_port(PickFreePort());
    v1::Assignment assignment;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(options_.poll_seconds + 15)));
    {
      MutexLock lock(&poll_mu_);
      if (stop_) break;
      poll_context_ = &context;
    }
    Status s = FromGrpcStatus(stub_->GetAssignment(&context, request, &assignment));
    {
      MutexLock lock(&poll_mu_);
      poll_context_ = nullptr;
    }
    if (stop_) break;
    if (!s.ok()) {
      if (s.code() == StatusCode::kNotFound) {
        MLCD_LOG(WARNING) << "the coordinator does not know this worker (" << s.message()
                          << "); registering again";
        MLCD_RETURN_IF_ERROR(Register());
        continue;
      }
      MLCD_LOG(WARNING) << "polling " << options_.coordinator << ": " << s.ToString()
                        << "; retrying";
      SleepUnlessStopped(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 5000);
      continue;
    }
    backoff_ms = 200;
    if (assignment.kind() == v1::ASSIGNMENT_KIND_NONE) continue;
    RunAssignment(assignment);
  }
  Deregister("the worker agent stopped");
  return Status::Ok();
}

Status Agent::StartChild(const std::vector<std::string>& argv, const std::string& log_path,
                         pid_t* pid_out) {
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.unset_env = ChildWithheldVariables();
  spawn.log_path = log_path;
  // Own process group (so a stop reaches the child's children too), dies with the agent.
  spawn.new_process_group = true;
  spawn.parent_death_signal = SIGKILL;
  spawn.clear_signal_mask = true;
  spawn.default_sigpipe = true;
  // Made afresh for every child: the rules name the entries that exist now.
  std::optional<WithheldFiles> withheld;
  if (withhold_files_) {
    StatusOr<WithheldFiles> built = WithheldFiles::Build(options_.withheld_files);
    if (!built.ok()) return built.status().WithContext("withholding the agent's credentials");
    withheld.emplace(std::move(*built));
    spawn.landlock_ruleset_fd = withheld->fd();
  }
  MLCD_ASSIGN_OR_RETURN(*pid_out, Spawn(spawn));
  return Status::Ok();
}

void Agent::StopChild(pid_t pid) {
  ::kill(-pid, SIGTERM);
  ::kill(pid, SIGTERM);
  const auto deadline = Clock::now() + options_.stop_grace;
  int status = 0;
  while (Clock::now() < deadline) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) {
      ::kill(-pid, SIGKILL);  // stragglers of its group
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  MLCD_LOG(WARNING) << "child " << pid << " ignored SIGTERM for " << options_.stop_grace.count()
                    << " ms; SIGKILL";
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
}

void Agent::KillChild(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

bool Agent::SendHeartbeat(const v1::Assignment& assignment, const v1::WorkerProgress& progress,
                          v1::HeartbeatResponse* response) {
  v1::HeartbeatRequest request;
  request.set_worker_id(worker_id_);
  request.set_assignment_id(assignment.id());
  *request.mutable_progress() = progress;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(options_.rpc_timeout));
  return stub_->Heartbeat(&context, request, response).ok();
}

void Agent::Report(const v1::ReportAssignmentRequest& report) {
  v1::ReportAssignmentRequest request = report;
  request.set_leaving(stop_.load());  // no new work for a stopping agent
  int backoff_ms = 200;
  bool logged = false;
  // Retry until the coordinator has it (it may be restarting); give up only when stopping.
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(options_.rpc_timeout));
    v1::ReportAssignmentResponse response;
    Status s = FromGrpcStatus(stub_->ReportAssignment(&context, request, &response));
    if (s.ok() || s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ||
        s.code() == StatusCode::kFailedPrecondition) {
      if (!s.ok()) {
        MLCD_LOG(WARNING) << "report of " << request.assignment_id()
                          << " rejected: " << s.ToString();
      }
      return;
    }
    if (stop_ && attempt >= 1) {
      MLCD_LOG(WARNING) << "stopping; report of " << request.assignment_id()
                        << " not delivered: " << s.ToString();
      return;
    }
    if (!logged) {
      MLCD_LOG(WARNING) << "cannot report " << request.assignment_id() << " yet (" << s.ToString()
                        << "); retrying";
      logged = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
}

// Follows a child's progress file as it grows: each complete line is one event.
class ProgressFollower {
 public:
  ProgressFollower(std::string path, std::string assignment_id)
      : path_(std::move(path)), assignment_id_(std::move(assignment_id)) {}

  // Applies the lines written since the last call. True when one of them is urgent.
  bool Poll(v1::WorkerProgress* progress, ChildOutcome* outcome) {
    if (!in_.is_open()) {
      in_.open(path_);
      if (!in_.is_open()) return false;
    }
    in_.clear();
    char buf[8192];
    while (in_.read(buf, sizeof(buf)) || in_.gcount() > 0)
      partial_.append(buf, static_cast<size_t>(in_.gcount()));
    in_.clear();
    bool urgent_any = false;
    size_t start = 0, nl;
    while ((nl = partial_.find('\n', start)) != std::string::npos) {
      std::string line = partial_.substr(start, nl - start);
      start = nl + 1;
      if (line.empty()) continue;
      bool urgent = false;
      if (!ApplyProgressEvent(line, progress, outcome, &urgent)) {
        MLCD_LOG(WARNING) << "assignment " << assignment_id_ << ": ignoring progress line '"
                          << line.substr(0, 200) << "'";
        continue;
      }
      urgent_any = urgent_any || urgent;
    }
    partial_.erase(0, start);
    return urgent_any;
  }

 private:
  const std::string path_;
  const std::string assignment_id_;
  std::ifstream in_;
  std::string partial_;
};

namespace {

// The one-line failure message of a child that exited with `wait_status`.
std::string ChildFailureMessage(const std::string& command, int wait_status,
                                const ChildOutcome& outcome, const std::string& log_path) {
  std::string how = WIFEXITED(wait_status) ? "exit code " + std::to_string(WEXITSTATUS(wait_status))
                    : WIFSIGNALED(wait_status)
                        ? "killed by signal " + std::to_string(WTERMSIG(wait_status))
                        : "ended";
  // One line: the child's own error event, else the last line of its log.
  std::string why = outcome.error_message;
  if (why.empty()) why = LastLines(log_path, 1);
  for (char& c : why) c = c == '\n' ? ' ' : c;
  std::string message = "mlcd-worker " + command + " " + how;
  if (!why.empty()) message += ": " + why;
  return message + " (log: " + log_path + ")";
}

}  // namespace

Status Agent::StartAssignment(const v1::Assignment& assignment, const AssignmentFiles& files,
                              pid_t* pid) {
  const std::string command = CommandFor(assignment.kind());
  if (std::find(options_.kinds.begin(), options_.kinds.end(), assignment.kind()) ==
      options_.kinds.end()) {
    return Status::Unimplemented("this mlcd-worker has no '" + command + "' command for " +
                                 v1::AssignmentKind_Name(assignment.kind()) + " assignments");
  }
  MLCD_RETURN_IF_ERROR(MakeDirs(files.dir));
  // The child reaches the label store through the gateway, scoped to this assignment.
  v1::Assignment child_assignment = assignment;
  if (!assignment.labelstore_address().empty()) {
    gateway_->SetScope(ScopeOf(assignment));
    child_assignment.set_labelstore_address(gateway_->address());
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  auto js = google::protobuf::util::MessageToJsonString(child_assignment, &json, options);
  if (!js.ok()) return Status::Internal("assignment to JSON: " + js.ToString());
  // 0600: an ASSIGN_LABELS assignment carries its label-write capability.
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(files.json, json, 0600));
  // A fresh progress file (the id is unique per gang attempt; this only matters on reuse).
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(files.progress, ""));
  std::vector<std::string> argv = {options_.worker_binary, command,
                                   "--assignment",         files.json,
                                   "--progress-jsonl",     files.progress};
  // The children that decode images: the spec's decode_memory_mb cannot go above this.
  if (command == "train" || command == "embed" || command == "eval") {
    argv.push_back("--max-decode-memory-mb");
    argv.push_back(std::to_string(options_.max_decode_memory_mb));
  }
  if (assignment.kind() == v1::ASSIGNMENT_KIND_TRAIN) {
    // Nothing committed is known for this assignment until its first heartbeat answer.
    if (::unlink(files.committed.c_str()) != 0 && errno != ENOENT)
      return Status::Internal("cannot remove " + files.committed + ": " + std::strerror(errno));
    argv.push_back("--committed-checkpoint-file");
    argv.push_back(files.committed);
    if (!options_.child_metrics_listen.empty()) {
      argv.push_back("--metrics-listen");
      argv.push_back(options_.child_metrics_listen);
    }
    const auto child_deadline = std::max<std::chrono::seconds>(
        std::chrono::seconds(1), options_.stop_deadline - kAgentStopMargin);
    argv.push_back("--stop-deadline-seconds");
    argv.push_back(std::to_string(child_deadline.count()));
  }
  for (const std::string& root : options_.data_roots.roots()) {
    argv.push_back("--data-root");
    argv.push_back(root);
  }
  for (const std::string& dir : options_.data_roots.private_dirs()) {
    argv.push_back("--private-dir");
    argv.push_back(dir);
  }
  return StartChild(argv, files.log, pid);
}

void Agent::PublishStatus(const v1::Assignment& assignment, const std::string& dir,
                          const std::string& state, pid_t pid, const v1::WorkerProgress& progress) {
  MutexLock lock(&mu_);
  status_.set_state(state);
  status_.set_assignment_id(state == "idle" ? "" : assignment.id());
  status_.set_job_id(state == "idle" ? "" : assignment.job_id());
  status_.set_rank(assignment.rank());
  status_.set_world_size(assignment.world_size());
  status_.set_kind(assignment.kind());
  status_.set_child_pid(pid);
  status_.set_assignment_dir(dir);
  *status_.mutable_progress() = progress;
}

void Agent::RecordCommit(const AssignmentFiles& files, const std::string& committed,
                         std::string* written) {
  if (committed.empty() || committed == *written) return;
  Status s = WriteFileAtomically(files.committed, committed + "\n");
  if (!s.ok()) {
    MLCD_LOG(WARNING) << "cannot record the committed checkpoint " << committed << " ("
                      << s.ToString() << "); the child keeps "
                      << (written->empty() ? "its resume checkpoint" : *written)
                      << " as the last commit";
    return;
  }
  *written = committed;
}

std::string Agent::SuperviseChild(const v1::Assignment& assignment, const AssignmentFiles& files,
                                  pid_t pid, ProgressFollower* follower,
                                  v1::WorkerProgress* progress, ChildOutcome* outcome,
                                  int* wait_status, bool* aborted) {
  *aborted = false;
  const int interval_ms = assignment.heartbeat_interval_ms() > 0
                              ? assignment.heartbeat_interval_ms()
                              : heartbeat_interval_ms_;
  const bool can_checkpoint = assignment.kind() == v1::ASSIGNMENT_KIND_TRAIN;
  auto last_heartbeat = Clock::now() - std::chrono::hours(1);
  bool coordinator_reachable = true;
  std::string committed_written;                   // what files.committed holds
  std::optional<Clock::time_point> stop_deadline;  // set once the child was asked to stop
  auto ask_to_stop = [&](const std::string& why) {
    MLCD_LOG(WARNING) << "assignment " << assignment.id() << ": " << why << "; asking child " << pid
                      << " to checkpoint and stop (deadline " << options_.stop_deadline.count()
                      << " s)";
    ::kill(pid, SIGTERM);
    stop_deadline = Clock::now() + options_.stop_deadline;
    std::string dir;
    {
      MutexLock lock(&mu_);
      dir = status_.assignment_dir();
    }
    PublishStatus(assignment, dir, "stopping", pid, *progress);
  };
  while (true) {
    const bool urgent = follower->Poll(progress, outcome);
    if (::waitpid(pid, wait_status, WNOHANG) == pid) {
      follower->Poll(progress, outcome);
      return "";
    }
    if (stop_ && !stop_deadline) {
      if (!can_checkpoint) return "the worker agent is shutting down";
      ask_to_stop("the worker agent is shutting down");
    }
    if (stop_deadline && Clock::now() >= *stop_deadline) {
      return "the child did not checkpoint and stop within " +
             std::to_string(options_.stop_deadline.count()) + " s";
    }
    {
      MutexLock lock(&mu_);
      *status_.mutable_progress() = *progress;
    }
    const auto now = Clock::now();
    if (urgent || now - last_heartbeat >= std::chrono::milliseconds(interval_ms)) {
      last_heartbeat = now;
      v1::HeartbeatResponse response;
      if (SendHeartbeat(assignment, *progress, &response)) {
        if (!coordinator_reachable) {
          MLCD_LOG(INFO) << "coordinator reachable again";
        }
        coordinator_reachable = true;
        if (can_checkpoint)
          RecordCommit(files, response.committed_checkpoint(), &committed_written);
        // While the child checkpoints, an abort changes nothing: it is stopping anyway.
        if (response.action() == v1::WORKER_ACTION_ABORT && !stop_deadline) {
          *aborted = true;
          return "aborted by the coordinator: " + response.reason();
        }
        if (response.action() == v1::WORKER_ACTION_STOP && can_checkpoint && !stop_deadline) {
          ask_to_stop("drained: " + response.reason());
        }
        if (response.action() == v1::WORKER_ACTION_REREGISTER) {
          // The coordinator no longer knows this worker, so the gang the child belongs to was
          // aborted: the child stops before it writes (or prunes) another checkpoint.
          MLCD_LOG(WARNING) << "coordinator asks to register again: " << response.reason();
          Status rs = Register();
          if (!rs.ok()) {
            MLCD_LOG(ERROR) << rs.ToString();
          }
          *aborted = true;
          return "the coordinator no longer knows this worker (" + response.reason() +
                 "); its gang was aborted";
        }
      } else if (coordinator_reachable) {
        // Keep training: the coordinator reattaches when it is back.
        MLCD_LOG(WARNING) << "heartbeat to " << options_.coordinator
                          << " failed; the child keeps running";
        coordinator_reachable = false;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Agent::DescribeExit(const std::string& command, int wait_status, const ChildOutcome& outcome,
                         const v1::WorkerProgress& progress, const std::string& log_path,
                         v1::ReportAssignmentRequest* report) {
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) {
    report->set_succeeded(true);
    report->set_message("finished at global step " + std::to_string(progress.total_steps()));
  } else if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kExitStoppedAtCheckpoint) {
    report->set_succeeded(false);
    report->set_preempted(true);
    report->set_message(
        "stopped at global step " + std::to_string(progress.total_steps()) +
        (progress.checkpoint().empty() ? std::string(" (no checkpoint yet)")
                                       : ", checkpoint " + progress.checkpoint()) +
        " (" + (outcome.stopped_reason.empty() ? "stop requested" : outcome.stopped_reason) + ")");
  } else {
    report->set_succeeded(false);
    report->set_message(ChildFailureMessage(command, wait_status, outcome, log_path));
  }
}

void Agent::FinishAssignment(const v1::ReportAssignmentRequest& report) {
  Report(report);
  MutexLock lock(&mu_);
  status_.set_assignments_finished(status_.assignments_finished() + 1);
  if (!report.succeeded()) status_.set_assignments_failed(status_.assignments_failed() + 1);
  status_.set_state("idle");
  status_.set_assignment_id("");
  status_.set_job_id("");
  status_.set_child_pid(0);
}

void Agent::RunAssignment(const v1::Assignment& assignment) {
  AssignmentFiles files;
  files.dir = options_.data_dir + "/assignments/" + SafeFileName(assignment.id());
  files.json = files.dir + "/assignment.json";
  files.progress = files.dir + "/progress.jsonl";
  files.log = files.dir + "/worker.log";
  files.committed = files.dir + "/committed_checkpoint";
  const std::string command = CommandFor(assignment.kind());
  MLCD_LOG(INFO) << "assignment " << assignment.id() << ": " << command << " rank "
                 << assignment.rank() << "/" << assignment.world_size() << " of job "
                 << assignment.job_id() << " (rendezvous " << assignment.rendezvous_address()
                 << ")";

  v1::ReportAssignmentRequest report;
  report.set_worker_id(worker_id_);
  report.set_assignment_id(assignment.id());
  v1::WorkerProgress progress;
  progress.set_phase("starting");
  progress.set_round(assignment.round());
  progress.set_epoch(assignment.first_epoch());
  progress.set_total_steps(assignment.start_global_step());

  pid_t pid = -1;
  Status s = StartAssignment(assignment, files, &pid);
  if (!s.ok()) {
    gateway_->ClearScope();
    MLCD_LOG(ERROR) << "assignment " << assignment.id() << ": " << s.ToString();
    report.set_succeeded(false);
    report.set_message(s.ToString());
    *report.mutable_progress() = progress;
    // As before: a child that never started leaves the agent's state as it was.
    Report(report);
    MutexLock lock(&mu_);
    status_.set_assignments_finished(status_.assignments_finished() + 1);
    status_.set_assignments_failed(status_.assignments_failed() + 1);
    return;
  }
  PublishStatus(assignment, files.dir, "running", pid, progress);
  if (metrics_) metrics_->Busy(true);
  if (proxy_ && assignment.kind() == v1::ASSIGNMENT_KIND_TRAIN)
    proxy_->SetTarget(options_.child_metrics_listen);

  ChildOutcome outcome;
  ProgressFollower follower(files.progress, assignment.id());
  int wait_status = 0;
  bool aborted = false;
  const std::string abort_reason = SuperviseChild(assignment, files, pid, &follower, &progress,
                                                  &outcome, &wait_status, &aborted);
  if (!abort_reason.empty()) {
    MLCD_LOG(WARNING) << "assignment " << assignment.id() << ": "
                      << (aborted ? "killing" : "stopping") << " child " << pid << ": "
                      << abort_reason;
    PublishStatus(assignment, files.dir, "stopping", pid, progress);
    if (aborted) {
      KillChild(pid);
    } else {
      StopChild(pid);
    }
    report.set_succeeded(false);
    report.set_message(abort_reason);
  } else {
    DescribeExit(command, wait_status, outcome, progress, files.log, &report);
  }
  for (const auto& o : outcome.outputs) report.add_output_paths(o);
  if (outcome.has_evaluation) *report.mutable_evaluation() = outcome.evaluation;
  if (outcome.has_cluster) *report.mutable_cluster() = outcome.cluster;
  if (outcome.has_assign) *report.mutable_assign() = outcome.assign;
  *report.mutable_progress() = progress;
  MLCD_LOG(INFO) << "assignment " << assignment.id() << " "
                 << (report.succeeded() ? "succeeded" : "failed") << ": " << report.message();
  PublishStatus(assignment, files.dir, "reporting", 0, progress);
  gateway_->ClearScope();
  if (proxy_) proxy_->SetTarget("");
  if (metrics_) {
    metrics_->Busy(false);
    metrics_->AssignmentEnded(command, report.succeeded()   ? "succeeded"
                                       : report.preempted() ? "preempted"
                                                            : "failed");
  }
  FinishAssignment(report);
}

}  // namespace mlcd::worker
