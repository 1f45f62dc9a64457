// The trainer's state (trainer.h), shared by its implementation files: trainer.cc (set-up,
// the step loop, checkpoints) and trainer_round_end.cc (where a round ends early: the time
// budget's step count, a stop at a checkpoint). Private to worker/train.
#pragma once

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>

#include "clients/labelstore_client.h"
#include "common/blas_env.h"
#include "common/file_util.h"
#include "common/format.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/npy.h"
#include "worker/dist/collectives.h"
#include "worker/model/model_memory.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"
#include "worker/train/grad_sync.h"
#include "worker/train/label_head_objective.h"
#include "worker/train/label_prefetcher.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/objective.h"
#include "worker/train/objective_factory.h"
#include "worker/train/partial_fc_objective.h"
#include "worker/train/round_layer.h"
#include "worker/train/sample_order.h"
#include "worker/train/step_budget.h"
#include "worker/train/stop_agreement.h"
#include "worker/train/train_metrics.h"
#include "worker/train/train_step.h"
#include "worker/train/trainer.h"

namespace mlcd::worker {

struct Trainer::Impl {
  TrainerOptions options;
  v1::JobSpec spec;
  std::unique_ptr<ImageDataset> dataset;
  VitOptions vit_options;
  // The gang's one group, on the rank's device (NCCL on CUDA, Gloo on the CPU): the backbone's
  // gradients, the classification layer, checkpoints and stop agreement.
  std::unique_ptr<Collectives> comm;
  torch::Device device{torch::kCPU};
  Precision precision = Precision::kFp32;
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<labelstore::LabelStoreClient> labels_client;
  VisionTransformer model{nullptr};
  std::unique_ptr<FlatParameters> flat;
  std::unique_ptr<BackboneAdamW> optimizer;
  std::unique_ptr<GradSync> grad_sync;
  // What the step optimises (worker/train/objective.h); `classification` is it when it is the
  // PartialFc layer (null otherwise).
  std::unique_ptr<TrainObjective> objective;
  PartialFcObjective* classification = nullptr;
  // The objective reads labels (a label set and the prefetcher); rows per image (views).
  bool needs_labels = true;
  int views = 1;
  // The objective is the PartialFc layer (class centres: memory, centroids, checkpoint sizes).
  bool class_centres = true;
  std::unique_ptr<TrainMetrics> metrics;
  LrScheduleOptions lr;
  ScheduleOptions schedule;
  std::string checkpoint_root;
  std::string resumed_from;
  int64_t steps_per_epoch = 0;
  int64_t job_total_steps = 0;
  // Global step of the round's first step: round * epochs_per_round * steps_per_epoch, or with
  // a time budget the step the previous round ended at (rounds of budgeted lengths, no gaps).
  int64_t round_base = 0;
  // training.time_budget_minutes: on, and the round's step count once fixed (0 = not yet).
  bool budgeted = false;
  int64_t round_steps = 0;
  std::unique_ptr<StepBudget> budget;
  std::function<double()> clock;  // monotonic seconds (options.clock or steady_clock)
  double setup_start = 0;         // clock() when Init began: the budget counts the set-up
  TrainerSummary summary;

  int64_t RoundStep(int epoch, int64_t step_in_epoch) const {
    return static_cast<int64_t>(epoch) * steps_per_epoch + step_in_epoch;
  }
  int64_t GlobalStep(int epoch, int64_t step_in_epoch) const {
    return round_base + RoundStep(epoch, step_in_epoch);
  }
  // The step the learning-rate schedule is indexed by: global, or the round's with a budget
  // or in an MCL stage (each stage trains an encoder of its own).
  int64_t LrStep(int epoch, int64_t step_in_epoch) const {
    return budgeted || spec.has_mcl() ? RoundStep(epoch, step_in_epoch)
                                      : GlobalStep(epoch, step_in_epoch);
  }
  int64_t MaxRoundSteps() const { return spec.training().epochs_per_round() * steps_per_epoch; }
  void Emit(const nlohmann::json& event) {
    if (options.on_event) options.on_event(event);
  }
  Status Init();
  Status ResolveSpec();
  Status CheckLabelSet();
  Status JoinAndBuild();
  Status SetUpSchedule();
  Status RestoreOrInitialise();
  Status CheckSameRoundCheckpoint(const CheckpointMeta& meta) const;
  Status MakeObjective();
  // CheckModelMemory for this rank's training (worker/model/model_memory.h), its host's free
  // memory shared by `ranks_on_host` ranks of the gang.
  Status CheckTrainingMemory(int ranks_on_host) const;
  void StartBudgetedRound(const CheckpointMeta* meta);
  // MCL: where the stage's global steps begin (its own checkpoint's stage start, the previous
  // stage's end, or options.start_global_step) and the job's estimated total.
  void StartStage(const CheckpointMeta* meta);
  void SetRoundSteps(int64_t steps);
  Status TimeStep();
  void FixRoundSteps(int64_t steps);
  Status Run();
  LabelPrefetcherOptions PrefetcherOptions() const;
  BatchLoaderOptions LoaderOptions() const;
  StatusOr<torch::Tensor> LabelRows(const LoadedBatch& batch, BatchLabels* labels);
  std::string ObjectiveFigures(const StepReport& report) const;
  void AnnounceStep(const StepPosition& pos, const StepReport& report, double loss,
                    bool last_batch);
  StatusOr<std::string> Checkpoint(const StepPosition& position, int64_t steps_done_in_epoch,
                                   bool round_end);
  // Ends the run after the step at `pos`: a checkpoint there unless `checkpointed`, then
  // "stopped".
  Status StopAfter(const StepPosition& pos, int64_t done, bool checkpointed);
};

}  // namespace mlcd::worker
