// The worker agent (`mlcd-worker agent`): the long-running process on every worker slot.
//
// It registers with the coordinator under a stable name, long-polls for assignments, and
// runs each one as a child process of the same executable:
//   TRAIN    -> mlcd-worker train --assignment A.json --progress-jsonl P.jsonl
//   EXTRACT  -> mlcd-worker embed --assignment A.json --progress-jsonl P.jsonl
//   EVALUATE -> mlcd-worker eval  --assignment A.json --progress-jsonl P.jsonl
// (each with --max-decode-memory-mb, the agent's ceiling on the decode memory of its loader
// threads)
// (A.json is the protobuf JSON of mlcd.v1.Assignment; see docs/contracts.md and
// docs/coordinator.md for the embed/eval contracts). While the child runs, the agent follows
// its progress file and heartbeats the latest progress (immediately on started, checkpoint,
// finished and error events, at the assignment's heartbeat interval otherwise). A heartbeat
// answered ABORT or REREGISTER (the gang was aborted: another member failed or timed out,
// the job was cancelled) kills the child's process group with SIGKILL at once, so it writes
// and prunes no checkpoint after the abort (a SIGTERM would make a TRAIN child finish its
// step and checkpoint). When the agent itself is stopped (SIGTERM, Stop()) or drained (a heartbeat
// answered STOP), a TRAIN child gets SIGTERM and up to the stop deadline to finish its step
// and checkpoint (worker/agent/stop_signal.h); its progress keeps flowing meanwhile, so the
// checkpoint is committed, and the report says preempted. A stopped agent then deregisters. When the child exits, the agent reports success (exit 0) or failure (the child's
// error event, exit status and the end of its log), retrying until the coordinator has the
// report, so nothing is lost while the coordinator restarts. Children die with the agent
// (PR_SET_PDEATHSIG), so kill -9 of an agent never leaves a training process behind.
// Children hold none of the agent's credentials (worker/agent/child_environment.h): they
// cannot read its key and token files (Landlock, where the kernel has it), and their
// assignment names the agent's label gateway (worker/agent/label_gateway.h, a Unix socket
// under <data-dir>/gateway/) as its label store, scoped to that assignment while it runs.
//
// Files: <data-dir>/assignments/<assignment id>/{assignment.json, progress.jsonl, worker.log,
// committed_checkpoint}. committed_checkpoint (TRAIN only) names the checkpoint the
// coordinator committed last, as its heartbeat answers say (written atomically whenever it
// changes); the train child, given it as --committed-checkpoint-file, never prunes that
// checkpoint nor a newer one (worker/train/checkpoint_retention.h).
// The agent serves mlcd.v1.Worker (GetWorkerStatus) with health and reflection on --listen.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/limits.h"
#include "common/mutex.h"
#include "common/status.h"
#include "mlcd/v1/coordinator.grpc.pb.h"
#include "mlcd/v1/worker.pb.h"
#include "worker/agent/metrics_proxy.h"
#include "worker/agent/progress_events.h"
#include "worker/agent/stop_signal.h"

namespace mlcd::worker {

struct AgentOptions {
  std::string coordinator = "127.0.0.1:7600";
  // Stable name of this worker slot (re-registering under it replaces the old entry).
  std::string name;
  // Host the other workers of a gang reach this one at (its TCPStore when rank 0).
  std::string host = "127.0.0.1";
  // mlcd.v1.Worker status service ("" = not served; port 0 = any).
  std::string listen = "127.0.0.1:7630";
  // Plaintext health-only gRPC address for probes that cannot speak TLS ("" = none).
  std::string health_listen;
  std::string data_dir = "./mlcd-worker-data";
  // Where the children may read and write (worker/agent/assignment_paths.h): passed to each
  // as --data-root flags. Empty = the children confine nothing (tests of the agent alone).
  DataRoots data_roots;
  // Executable of the children (default: this process's own executable).
  std::string worker_binary;
  // Passed to train children as --metrics-listen (one fixed address per slot; "" = children
  // serve no metrics). With metrics_listen set, the agent serves the child's metrics through
  // its own /metrics, so this can stay on loopback.
  std::string child_metrics_listen;
  // The agent's own /metrics, served all the time (worker/agent/metrics_proxy.h; "" = none).
  std::string metrics_listen;
  // Passed to every train, embed and eval child as --max-decode-memory-mb: the ceiling on the
  // decode memory its loader threads share, whatever the spec's dataset.decode_memory_mb asks
  // (worker/data/decode_budget.h).
  int max_decode_memory_mb = kDefaultMaxDecodeMemoryMb;
  // Files the children may not read (worker/agent/child_environment.h ChildWithheldFiles),
  // enforced with Landlock where the kernel has it (common/withheld_files.h); empty = none.
  std::vector<std::string> withheld_files;
  // Reported capacity (0 = the machine's cores).
  int cpu_threads = 0;
  int gpus = 0;
  // Long-poll length.
  int poll_seconds = 10;
  // Assignment kinds this executable can run (from its subcommands).
  std::vector<v1::AssignmentKind> kinds = {v1::ASSIGNMENT_KIND_TRAIN};
  // SIGTERM -> SIGKILL grace when aborting a child.
  std::chrono::milliseconds stop_grace{5000};
  // How long a stopping agent waits for a TRAIN child to checkpoint and exit; the child is
  // given this minus kAgentStopMargin as its own deadline.
  std::chrono::seconds stop_deadline{kDefaultStopDeadlineSeconds};
  // Deadline of heartbeats and reports.
  std::chrono::milliseconds rpc_timeout{5000};
  std::string version = "mlcd-worker";
};

class ProgressFollower;
class LabelGateway;

class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();

  // Runs until Stop() (or a shutdown signal seen by the caller, who then calls Stop()).
  // Returns an error only for problems a restart cannot fix (bad flags, a name the
  // coordinator rejects).
  Status Run();
  // Asks Run() to return: stops a running child, cancels the poll in flight.
  void Stop() LOCKS_EXCLUDED(poll_mu_);
  // Where the status service actually listens (with the bound port), reported at
  // registration. Call before Run().
  void SetStatusAddress(const std::string& address) { options_.listen = address; }
  // Where the agent records its own metrics and proxies its train child's (both outlive the
  // agent; either may be null). Call before Run().
  void SetMetrics(AgentMetrics* metrics, ChildMetricsProxy* proxy) {
    metrics_ = metrics;
    proxy_ = proxy;
  }

  v1::WorkerStatus Snapshot() LOCKS_EXCLUDED(mu_);

 private:
  // Where one assignment's files live: <data-dir>/assignments/<id>/.
  struct AssignmentFiles {
    std::string dir, json, progress, log;
    // TRAIN: the checkpoint the coordinator committed last (HeartbeatResponse.
    // committed_checkpoint), one line, rewritten atomically whenever it changes; the child
    // gets it as --committed-checkpoint-file and never prunes that checkpoint or a newer one.
    std::string committed;
  };

  Status Register();
  // Best effort, once: tells the coordinator this worker leaves (DeregisterWorker).
  void Deregister(const std::string& reason);
  // Runs one assignment to its report: start the child, supervise it, report the outcome.
  void RunAssignment(const v1::Assignment& assignment);
  // Checks the kind is supported, writes the assignment's files and starts the child.
  Status StartAssignment(const v1::Assignment& assignment, const AssignmentFiles& files,
                         pid_t* pid);
  // Follows the child's progress and heartbeats it until the child exits ("" returned,
  // `wait_status` set) or must be stopped (the reason returned: shutdown or abort;
  // `aborted` set when the coordinator aborted the gang, so the child must die at once).
  // A TRAIN child asked to stop at a checkpoint (shutdown or drain) is waited for here, up
  // to the stop deadline, and "" is returned once it exits.
  std::string SuperviseChild(const v1::Assignment& assignment, const AssignmentFiles& files,
                             pid_t pid, ProgressFollower* follower, v1::WorkerProgress* progress,
                             ChildOutcome* outcome, int* wait_status, bool* aborted);
  // Writes a heartbeat answer's committed checkpoint to files.committed when it differs from
  // `*written` (then updates it). A failed write is logged and retried with the next answer;
  // meanwhile the child keeps the older commit, which only keeps more checkpoints.
  void RecordCommit(const AssignmentFiles& files, const std::string& committed,
                    std::string* written);
  // The report of a child that exited with `wait_status`.
  void DescribeExit(const std::string& command, int wait_status, const ChildOutcome& outcome,
                    const v1::WorkerProgress& progress, const std::string& log_path,
                    v1::ReportAssignmentRequest* report);
  // status_ as the assignment runs (state "running", "stopping", "reporting").
  void PublishStatus(const v1::Assignment& assignment, const std::string& dir,
                     const std::string& state, pid_t pid, const v1::WorkerProgress& progress)
      LOCKS_EXCLUDED(mu_);
  // Delivers the report and puts the agent back to idle.
  void FinishAssignment(const v1::ReportAssignmentRequest& report) LOCKS_EXCLUDED(mu_);
  Status StartChild(const std::vector<std::string>& argv, const std::string& log_path, pid_t* pid);
  // SIGTERM to the child's process group, SIGKILL after stop_grace.
  void StopChild(pid_t pid);
  // SIGKILL to the child's process group at once: the coordinator aborted its gang, so
  // nothing it would do on a SIGTERM (finish the step, write and prune a checkpoint) may
  // happen. Checkpoint writes are atomic, so a kill mid-write leaves no partial checkpoint.
  void KillChild(pid_t pid);
  bool SendHeartbeat(const v1::Assignment& assignment, const v1::WorkerProgress& progress,
                     v1::HeartbeatResponse* response);
  void Report(const v1::ReportAssignmentRequest& request);
  void SleepUnlessStopped(std::chrono::milliseconds d);

  AgentOptions options_;
  AgentMetrics* metrics_ = nullptr;
  ChildMetricsProxy* proxy_ = nullptr;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::atomic<bool> stop_{false};
  // The children's only way to the label store (started by Run()).
  std::unique_ptr<LabelGateway> gateway_;
  // Whether children are started under a ruleset withholding options_.withheld_files (Run()
  // finds out once whether the kernel can).
  bool withhold_files_ = false;

  Mutex poll_mu_;
  grpc::ClientContext* poll_context_ GUARDED_BY(poll_mu_) = nullptr;

  Mutex mu_;
  v1::WorkerStatus status_ GUARDED_BY(mu_);
  std::string worker_id_;
  int heartbeat_interval_ms_ = 1000;
};

}  // namespace mlcd::worker
