// `mlcd-worker train`: trains one rank of a gang (what the coordinator's worker agent runs
// as a child process for every training assignment; docs/worker.md).
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "common/flags.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/metrics.h"
#include "mlcd/v1/coordinator.pb.h"
#include "worker/agent/assignment_paths.h"
#include "worker/agent/stop_signal.h"
#include "worker/command.h"
#include "worker/command_io.h"
#include "worker/train/trainer.h"
#include "worker/train/training_curves.h"

namespace mlcd::worker {
namespace {

// How long a rank that lost a peer waits before it reports (so the peer's cause comes first).
constexpr std::chrono::seconds kPeerFailureReportDelay{3};

struct TrainFlags {
  std::string spec_path;
  std::string assignment_path;
  WorkerRootFlags data_roots;
  int rank = 0;
  int world_size = 1;
  std::string rendezvous;
  std::string labelstore;
  std::string label_set;
  std::string centroids;
  int round = 0;
  int first_epoch = 0;
  int end_epoch = -1;
  std::string checkpoint_dir;
  std::string resume;
  std::string metrics_listen;
  std::string progress_jsonl;
  int threads = 0;
  int keep_checkpoints = 3;
  std::string committed_checkpoint_file;
  std::string tensorboard_dir;
  std::string device = "auto";
  int log_every = 10;
  int stop_deadline_seconds = kDefaultStopDeadlineSeconds;
  std::string log_level = "info";
};

// Gives a stop its deadline: once SIGTERM/SIGINT has arrived, a run still going after
// `deadline` (a step or checkpoint that cannot finish, a peer that never answers) ends the
// process with an error event instead of waiting for the agent's SIGKILL.
class StopDeadline {
 public:
  StopDeadline(std::chrono::seconds deadline, cli::JsonLines* progress)
      : thread_([this, deadline, progress] { Watch(deadline, progress); }) {}
  // Training has begun: a stop from now on ends at a checkpoint.
  void Training() { training_ = true; }
  ~StopDeadline() {
    done_ = true;
    thread_.join();
  }

 private:
  void Watch(std::chrono::seconds deadline, cli::JsonLines* progress) {
    while (!done_ && !StopSignal().load())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (done_) return;
    if (!training_) {
      // Still joining the gang or loading: nothing new to save; the job resumes from its
      // last checkpoint.
      progress->Write({{"event", "stopped"}, {"reason", "stop requested before training began"}});
      std::_Exit(kExitStoppedAtCheckpoint);
    }
    MLCD_LOG(WARNING) << "stop requested: finishing the step, then a checkpoint (deadline "
                      << deadline.count() << " s)";
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (!done_ && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (done_) return;
    progress->Fail(Status::DeadlineExceeded(
        "stop requested but no checkpoint within " + std::to_string(deadline.count()) +
        " s (--stop-deadline-seconds); the job resumes from its previous checkpoint"));
    std::_Exit(1);
  }

  std::atomic<bool> done_{false};
  std::atomic<bool> training_{false};
  std::thread thread_;
};

// Rank 0's TensorBoard curves under `tensorboard_dir` (none when it is empty). Curves never
// stop training: a folder that cannot be written is logged and training goes on without them.
std::unique_ptr<TrainingCurves> OpenTrainingCurves(const std::string& tensorboard_dir,
                                                   const v1::JobSpec& spec) {
  if (tensorboard_dir.empty()) return nullptr;
  TrainingCurvesOptions c;
  c.tensorboard_dir = tensorboard_dir;
  c.every_steps = spec.training().tensorboard_every_steps() > 0
                      ? spec.training().tensorboard_every_steps()
                      : kDefaultTensorboardEverySteps;
  c.centre_lr_multiplier = spec.optimizer().centre_lr_multiplier();
  auto made = TrainingCurves::Create(c);
  if (!made.ok()) {
    MLCD_LOG(WARNING) << "no TensorBoard curves (--tensorboard-dir): " << made.status().ToString();
    return nullptr;
  }
  MLCD_LOG(INFO) << "TensorBoard curves: " << (*made)->path() << " every " << c.every_steps
                 << " steps";
  return std::move(*made);
}

void CloseTrainingCurves(TrainingCurves* curves) {
  Status closed = curves->Close();
  if (!closed.ok()) MLCD_LOG(WARNING) << "TensorBoard curves: " << closed.ToString();
}

bool Given(const CLI::Option* opt, const char* env) {
  return opt->count() > 0 || (env && std::getenv(env));
}

int RunTrain(const TrainFlags& flags, const CLI::App& cmd) {
  InstallStopSignalHandler();
  cli::JsonLines progress;
  auto fail = [&progress](const Status& st) { return progress.Fail(st); };
  if (!cli::ApplyLogLevelFlag(flags.log_level)) return 2;
  Status st = progress.Open(flags.progress_jsonl);
  if (!st.ok()) return fail(st);

  TrainerOptions o;
  std::string tensorboard_dir = flags.tensorboard_dir;
  // The assignment first; explicit flags override its fields.
  bool have_spec = false;
  if (!flags.assignment_path.empty()) {
    auto read = cli::ReadAssignment(flags.assignment_path);
    if (!read.ok()) return fail(read.status().WithContext("--assignment"));
    const v1::Assignment& a = *read;
    st = ConfineAssignmentForChild(a, flags.data_roots);
    if (!st.ok()) return fail(st);
    if (a.has_spec()) {
      o.spec = a.spec();
      have_spec = true;
    }
    o.rank = a.rank();
    o.world_size = a.world_size() > 0 ? a.world_size() : 1;
    o.rendezvous = a.rendezvous_address();
    o.round = a.round();
    o.job_id = a.job_id();
    o.first_epoch = a.first_epoch();
    o.end_epoch = a.end_epoch() > 0 ? a.end_epoch() : -1;
    o.label_set = a.label_set();
    o.centroids_path = a.centroids_path();
    o.labelstore_address = a.labelstore_address();
    o.resume = a.resume_checkpoint();
    o.checkpoint_dir = a.checkpoint_dir();
    o.round_steps = a.round_steps();
    o.pseudo_label_sets.assign(a.pseudo_label_sets().begin(), a.pseudo_label_sets().end());
    o.start_global_step = a.start_global_step();
    if (tensorboard_dir.empty()) tensorboard_dir = a.tensorboard_dir();
  }
  if (!flags.spec_path.empty()) {
    auto spec = LoadJobSpecFile(flags.spec_path);
    if (!spec.ok()) return fail(spec.status().WithContext("--spec"));
    o.spec = *spec;
    have_spec = true;
  }
  if (!have_spec)
    return fail(Status::InvalidArgument("no job spec: pass --spec FILE or --assignment FILE"));
  if (Given(cmd.get_option("--rank"), "MLCD_RANK") || flags.assignment_path.empty())
    o.rank = flags.rank;
  if (Given(cmd.get_option("--world-size"), "MLCD_WORLD_SIZE") || flags.assignment_path.empty())
    o.world_size = flags.world_size;
  if (Given(cmd.get_option("--rendezvous"), "MLCD_RENDEZVOUS") || flags.assignment_path.empty())
    o.rendezvous = flags.rendezvous;
  if (Given(cmd.get_option("--labelstore"), "MLCD_LABELSTORE") || o.labelstore_address.empty())
    o.labelstore_address = flags.labelstore;
  if (!flags.label_set.empty()) o.label_set = flags.label_set;
  // A spec that trains on a given set (clustering.label_set) names it itself.
  if (o.label_set.empty()) o.label_set = o.spec.clustering().label_set();
  if (!flags.centroids.empty()) o.centroids_path = flags.centroids;
  if (Given(cmd.get_option("--round"), nullptr) || flags.assignment_path.empty())
    o.round = flags.round;
  if (Given(cmd.get_option("--first-epoch"), nullptr) || flags.assignment_path.empty())
    o.first_epoch = flags.first_epoch;
  if (Given(cmd.get_option("--end-epoch"), nullptr) || flags.assignment_path.empty())
    o.end_epoch = flags.end_epoch;
  if (!flags.checkpoint_dir.empty()) o.checkpoint_dir = flags.checkpoint_dir;
  if (!flags.resume.empty()) o.resume = flags.resume;
  o.threads = flags.threads;
  o.keep_checkpoints = flags.keep_checkpoints;
  o.committed_checkpoint_file = flags.committed_checkpoint_file;
  o.device = flags.device;
  o.log_every = flags.log_every;
  SetLogComponent("worker r" + std::to_string(o.rank));

  MetricsServer metrics;
  if (!flags.metrics_listen.empty()) {
    st = metrics.Serve(flags.metrics_listen);
    if (!st.ok()) return fail(st.WithContext("--metrics-listen"));
    MLCD_LOG(INFO) << "metrics on http://" << flags.metrics_listen << "/metrics (port "
                   << metrics.port() << ")";
  }
  o.metrics = &metrics;
  std::unique_ptr<TrainingCurves> curves =
      o.rank == 0 ? OpenTrainingCurves(tensorboard_dir, o.spec) : nullptr;
  // The curves first, so that a "finished" event is on disk before the agent reads it.
  o.on_event = [&progress, &curves](const nlohmann::json& event) {
    if (curves) curves->OnEvent(event);
    progress.Write(event);
  };
  o.stop_requested = &StopSignal();
  StopDeadline deadline(std::chrono::seconds(flags.stop_deadline_seconds), &progress);

  auto trainer = Trainer::Create(o);
  if (!trainer.ok()) return fail(trainer.status());
  deadline.Training();
  st = (*trainer)->Run();
  if (curves) CloseTrainingCurves(curves.get());
  if (st.ok() && (*trainer)->summary().stopped) return kExitStoppedAtCheckpoint;
  if (!st.ok() && st.code() == StatusCode::kUnavailable && o.world_size > 1) {
    // A lost peer is mostly the echo of the peer's own failure (e.g. too many bad images,
    // docs/data.md): report it a moment later, so the coordinator hears the cause first.
    std::this_thread::sleep_for(kPeerFailureReportDelay);
  }
  if (!st.ok()) return fail(st);
  return 0;
}

CommandRegistration train_registration(10, [](CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd =
      app.add_subcommand("train",
                         "Train one rank of a gang: ViT + sharded MLCD loss over c10d, labels from "
                         "mlcd-labelstore, checkpoints, progress as JSON lines");
  cmd->add_option("--spec", flags->spec_path,
                  "job spec: YAML (mlcdctl submit form), or protobuf JSON of mlcd.v1.JobSpec when "
                  "the name ends in "
                  ".json; overrides the assignment's spec");
  cmd->add_option(
      "--assignment", flags->assignment_path,
      "protobuf JSON of mlcd.v1.Assignment (spec, rank, world size, rendezvous, round, epochs, "
      "label "
      "set, label store, resume checkpoint, checkpoint dir); explicit flags override its fields");
  AddWorkerDataRootFlag(*cmd, &flags->data_roots,
                        "none: paths are not confined (the agent passes its own roots)");
  cmd->add_option("--rank", flags->rank, "this worker's rank")->envname("MLCD_RANK");
  cmd->add_option("--world-size", flags->world_size, "ranks in the gang")
      ->envname("MLCD_WORLD_SIZE");
  cmd->add_option("--rendezvous", flags->rendezvous,
                  "HOST:PORT of rank 0's c10d TCPStore (rank 0 serves it)")
      ->envname("MLCD_RENDEZVOUS");
  AddPeerFlag(*cmd, "labelstore", &flags->labelstore, "127.0.0.1:7610");
  cmd->add_option("--label-set", flags->label_set,
                  "label set to train on, e.g. job/<id>/r<round> (default: the spec's "
                  "clustering.label_set; not read with loss.variant infonce)");
  cmd->add_option(
      "--centroids", flags->centroids,
      "the round's k-means centroids (.npy, k x embed_dim) for training.centre_init (auto: used in "
      "rounds that clustered this model's embeddings)");
  cmd->add_option("--round", flags->round, "round of the job (0-based)");
  cmd->add_option("--first-epoch", flags->first_epoch,
                  "first epoch of the round to train (0-based)");
  cmd->add_option("--end-epoch", flags->end_epoch,
                  "train epochs [first, end) of the round (default: training.epochs_per_round)");
  cmd->add_option("--checkpoint-dir", flags->checkpoint_dir,
                  "checkpoint root shared by the gang (default: training.checkpoint_dir)");
  cmd->add_option("--resume", flags->resume,
                  "checkpoint directory, or a checkpoint root with LATEST, to resume from");
  cmd->add_option("--metrics-listen", flags->metrics_listen,
                  "serve Prometheus /metrics on HOST:PORT");
  cli::AddProgressJsonlFlag(cmd, &flags->progress_jsonl);
  cmd->add_option("--device", flags->device,
                  "where the backbone trains: auto (a CUDA device when there is one), cpu, cuda, "
                  "cuda:N; the class centres stay in host memory")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads,
                  "intra-op threads (default: training.threads_per_worker, else all)");
  cmd->add_option("--keep-checkpoints", flags->keep_checkpoints,
                  "keep the newest N checkpoints (0 = all); never the one resumed from, nor the "
                  "coordinator's last commit or a newer one (see --committed-checkpoint-file)")
      ->envname("MLCD_KEEP_CHECKPOINTS")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--committed-checkpoint-file", flags->committed_checkpoint_file,
                  "file naming the checkpoint the coordinator committed last (the agent passes "
                  "it and keeps it current): pruning never removes that one nor a newer one; "
                  "until the file exists, the one resumed from counts as committed");
  cmd->add_option("--tensorboard-dir", flags->tensorboard_dir,
                  "rank 0 writes TensorBoard event files of the training scalars under DIR/train "
                  "every training.tensorboard_every_steps steps (default: the assignment's)");
  cmd->add_option("--log-every", flags->log_every, "log a progress line every N steps")
      ->capture_default_str();
  cmd->add_option("--stop-deadline-seconds", flags->stop_deadline_seconds,
                  "on SIGTERM/SIGINT: finish the step, checkpoint there and exit 75 within this "
                  "many seconds, else exit 1 (the agent passes its own deadline)")
      ->envname("MLCD_STOP_DEADLINE_SECONDS")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  cli::AddLogLevelFlag(cmd, &flags->log_level);
  cli::AddChildMaxDecodeMemoryFlag(cmd);
  cmd->callback([flags, cmd, exit_code] { *exit_code = RunTrain(*flags, *cmd); });
});

}  // namespace
}  // namespace mlcd::worker
