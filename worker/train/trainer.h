// The training loop of one rank (`mlcd-worker train`; docs/worker.md).
//
// Per step, on every rank of the gang:
//   labels  <- LabelPrefetcher (background GetLabels from mlcd-labelstore, `depth` ahead; not
//              run for infonce, which reads no labels)
//   images  <- BatchLoader (background gather + augmentation; pinned when training on CUDA;
//              two interleaved views per image for the contrastive variants)
//   TrainStep (worker/train/train_step.h) on the rank's device and training.precision, with
//   the objective loss.variant names (worker/train/objective_factory.h):
//     emb      = ViT(images)                               backbone forward
//     r        = objective.ForwardBackward(emb, labels)   the PartialFc layer's sharded MLCD
//                                                          loss, or the contrastive loss on the
//                                                          projection head (collectives inside)
//     emb.backward(r.grad_embeddings)                      backbone backward (flat gradient buffer)
//     GradSync: bucketed allreduce (sum) of the backbone gradient (NCCL on CUDA, else Gloo),
//       then the objective's replicated parameters' (the projection head)
//     BackboneAdamW.StepOnDevice(lr)  (clipping folded in);
//       objective.MaskedOptimizerStep(lr * centre_mult for the class centres, lr for a head)
// with lr from the job-wide warmup + cosine schedule of the global step. Checkpoints at
// every epoch end and every checkpoint_every_steps (a collective; worker/train/checkpoint.h).
// With training.time_budget_minutes the round's step count is fixed after its first steps
// (rank 0 times them and broadcasts the count; worker/train/step_budget.h), the schedule runs
// per round over exactly that count, and the round's last step ends a (possibly partial)
// last epoch with a checkpoint marked complete; a "budget" event reports the count.
// Progress goes to a callback as JSON events (docs/contracts.md), metrics to Prometheus.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd::worker {

struct TrainerOptions {
  // The job spec; ApplyJobSpecDefaults() is applied again by Create().
  v1::JobSpec spec;
  int rank = 0;
  int world_size = 1;
  // HOST:PORT of rank 0's TCPStore (may be empty at world size 1).
  std::string rendezvous;
  // The label store and the round's label set (both unused, and may be empty, for infonce).
  std::string labelstore_address;
  std::string label_set;
  // The round's k-means centroids (.npy, k x d) for training.centre_init (may be empty).
  std::string centroids_path;
  int round = 0;
  // Job id: the job_id label of the metrics (empty = "standalone") and the owner the checkpoint
  // root is claimed for (worker/train/checkpoint.h; empty = a run by hand, claiming nothing).
  std::string job_id;
  // Epochs [first_epoch, end_epoch) of the round; end_epoch < 0 = training.epochs_per_round.
  int first_epoch = 0;
  int end_epoch = -1;
  // Checkpoint root (empty = training.checkpoint_dir; both empty = no checkpoints).
  std::string checkpoint_dir;
  // Checkpoint directory, or a root with LATEST, to resume from (empty = fresh start).
  std::string resume;
  // Keep only the newest N checkpoints of the root (0 = keep all), never the one resumed from.
  int keep_checkpoints = 3;
  // The agent's committed-checkpoint file (empty = a run by hand): pruning then never removes
  // the checkpoint it names nor a newer one (worker/train/checkpoint_retention.h).
  std::string committed_checkpoint_file;
  // Intra-op threads (0 = training.threads_per_worker, then all cores).
  int threads = 0;
  // Where the backbone trains: "auto" (CUDA device rank % device count when this build and
  // machine have CUDA, else the CPU), "cpu", "cuda", "cuda:N" (worker/train/train_step.h).
  // The class centres stay in host memory on every device.
  std::string device = "auto";
  // Log a line every N steps (progress events are emitted every step).
  int log_every = 10;
  // Prefix of this gang's keys in the TCPStore.
  std::string store_prefix = "mlcd";
  // Where metrics go (may be null).
  MetricsServer* metrics = nullptr;
  // Asks the gang to stop early (may be null; set from a SIGTERM handler's flag, see
  // worker/agent/stop_signal.h). After every step but the assignment's last, the ranks agree
  // on it (one one-element allreduce): once any rank's flag is set, every rank stops after
  // the same step, the gang writes a checkpoint there (unless the step just wrote one),
  // emits "stopped" and Run() returns OK with summary().stopped set.
  const std::atomic<bool>* stop_requested = nullptr;
  // MCL (spec.mcl), stage `round` >= 1: the sealed sets of stages 0..round-1; the samples are
  // visited in the feature-aware order of their pseudo-labels (stage_pseudo_labels.h,
  // sample_order.h). Empty: the usual order.
  std::vector<std::string> pseudo_label_sets;
  // MCL: the global step a stage that starts without a checkpoint of its own or of the
  // previous stage (mcl.stage_init scratch) begins at (Assignment.start_global_step).
  int64_t start_global_step = 0;
  // training.time_budget_minutes: the round's step count fixed by an earlier gang (the
  // coordinator's Assignment.round_steps); 0 = time the first steps and fix it
  // (worker/train/step_budget.h). Ignored without a budget.
  int64_t round_steps = 0;
  // Monotonic clock in seconds for the time budget (null = steady_clock); tests pass a fake.
  std::function<double()> clock;
  // Receives every progress event (started, progress, checkpoint, finished). Errors are
  // returned by Run(); the caller reports them.
  std::function<void(const nlohmann::json&)> on_event;
};

// Training state after Run(), for callers and tests.
struct TrainerSummary {
  int64_t first_global_step = 0;
  int64_t global_step = 0;  // optimizer steps of the job after the run
  int64_t steps_run = 0;
  // training.time_budget_minutes: the round's step count (0 = no budget or not fixed).
  int64_t round_steps = 0;
  double first_loss = 0;
  double last_loss = 0;
  std::string last_checkpoint;
  double label_wait_seconds = 0;
  double data_wait_seconds = 0;
  double seconds = 0;
  // Run() stopped early on stop_requested (at a checkpoint when there is a checkpoint root).
  bool stopped = false;
};

class Trainer {
 public:
  // Validates the inputs (spec, ranks, label set against the spec, checkpoint), joins the
  // gang (rendezvous: blocks until all ranks are there or the collective timeout passes),
  // builds or restores the model and the classification shard. INVALID_ARGUMENT /
  // FAILED_PRECONDITION / NOT_FOUND with a message naming what to fix.
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options);
  ~Trainer();

  // Trains the assigned epochs. Emits "started", "progress" per step, "checkpoint" per
  // checkpoint, "budget" when a time budget fixed the round's steps, "finished" at the end (or
  // "stopped" when asked to stop early).
  Status Run();

  const TrainerSummary& summary() const;

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Loads a job spec file: protobuf JSON of mlcd.v1.JobSpec when the name ends in .json,
// otherwise the YAML `mlcdctl submit` form. Defaults applied and validated.
StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

}  // namespace mlcd::worker
