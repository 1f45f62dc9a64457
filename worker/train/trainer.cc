#include "worker/train/trainer.h"

#include <google/protobuf/util/json_util.h>
#include <torch/torch.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/stopwatch.h"
#include "worker/train/trainer_impl.h"

#include "common/random.h"
#include "worker/dist/host_ranks.h"
#include "worker/train/stage_pseudo_labels.h"

namespace mlcd::worker {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The figures of a finished step that come from the step itself (the loop adds the rest).
StepReport StepFigures(const TrainStepResult& r) {
  const ObjectiveStep& out = r.objective;
  const TrainStepTimings& t = r.timings;
  StepReport report;
  report.loss = out.loss;
  report.mean_positive_cosine = out.stats.mean_positive_cosine;
  report.mean_negative_cosine = out.stats.mean_negative_cosine;
  report.mean_positives = out.stats.mean_positives;
  report.anchors_without_positives = out.stats.anchors_without_positives;
  report.grad_norm = r.backbone.grad_norm;
  report.timings.backbone =
      t.host_to_device + t.backbone_forward + t.backbone_backward + t.backbone_optimizer;
  report.timings.classification_layer = t.classification_layer + t.centre_optimizer;
  report.timings.collectives = t.classification_collectives + t.grad_sync;
  return report;
}

}  // namespace

// The job spec with defaults, this gang's world size and the options checked against it.
Status Trainer::Impl::ResolveSpec() {
  spec = options.spec;
  ApplyJobSpecDefaults(&spec);
  if (options.world_size < 1) return Status::InvalidArgument("--world-size must be >= 1");
  if (options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("--rank " + std::to_string(options.rank) + " is outside [0, " +
                                   std::to_string(options.world_size) + ")");
  }
  if (spec.training().world_size() != options.world_size) {
    MLCD_LOG(INFO) << "the spec says world_size " << spec.training().world_size()
                   << "; this gang has " << options.world_size
                   << " ranks (class centres are resharded by class range)";
    spec.mutable_training()->set_world_size(options.world_size);
  }
  MLCD_RETURN_IF_ERROR(ValidateJobSpec(&spec));
  const int epochs_per_round = spec.training().epochs_per_round();
  if (options.end_epoch < 0) options.end_epoch = epochs_per_round;
  if (options.round < 0 || options.round >= spec.training().rounds()) {
    return Status::InvalidArgument(
        "--round " + std::to_string(options.round) + " is outside the job's " +
        std::to_string(spec.training().rounds()) + " rounds (training.rounds)");
  }
  if (options.first_epoch < 0 || options.end_epoch > epochs_per_round ||
      options.first_epoch > options.end_epoch) {
    return Status::InvalidArgument("epochs [" + std::to_string(options.first_epoch) + ", " +
                                   std::to_string(options.end_epoch) + ") do not fit the round's " +
                                   std::to_string(epochs_per_round) +
                                   " epochs (training.epochs_per_round)");
  }
  needs_labels = NeedsLabels(spec);
  views = ViewsPerImage(spec);
  MLCD_ASSIGN_OR_RETURN(const LossFamily family, LossFamilyOf(spec.loss().variant()));
  class_centres = family == LossFamily::kClassification;
  if (!needs_labels) {
    // infonce: every image is its own class; a label set given anyway is not read.
    if (!options.label_set.empty()) {
      MLCD_LOG(INFO) << "loss.variant " << spec.loss().variant() << " reads no labels; label set '"
                     << options.label_set << "' is not used";
    }
    options.label_set.clear();
    return Status::Ok();
  }
  if (options.label_set.empty()) {
    return Status::InvalidArgument(
        "no label set: pass --label-set NAME (e.g. job/<id>/r<round>); "
        "loss.variant " +
        spec.loss().variant() + " trains on per-sample labels (only infonce needs none)");
  }
  if (options.labelstore_address.empty())
    return Status::InvalidArgument("no label store: pass --labelstore HOST:PORT");
  return Status::Ok();
}

// The sample order of this run (sample_order.h) and the step counts derived from it.
Status Trainer::Impl::SetUpSchedule() {
  const int epochs_per_round = spec.training().epochs_per_round();
  schedule.seed = spec.training().seed();
  schedule.num_samples = dataset->size();
  schedule.global_batch_size = spec.training().batch_size();
  schedule.max_steps_per_epoch = spec.training().max_steps_per_epoch();
  schedule.round = options.round;
  schedule.first_epoch = options.first_epoch;
  schedule.end_epoch = options.end_epoch;
  schedule.rank = options.rank;
  schedule.world_size = options.world_size;
  if (!options.pseudo_label_sets.empty()) {
    labelstore::LabelStoreClient client(options.labelstore_address);
    MLCD_ASSIGN_OR_RETURN(
        std::vector<int64_t> pseudo,
        ReadStagePseudoLabels(client, options.pseudo_label_sets, schedule.num_samples));
    schedule.pseudo_labels = std::make_shared<const std::vector<int64_t>>(std::move(pseudo));
  }
  MLCD_RETURN_IF_ERROR(ValidateSchedule(schedule));
  steps_per_epoch = ScheduleStepsPerEpoch(schedule);
  job_total_steps =
      static_cast<int64_t>(spec.training().rounds()) * epochs_per_round * steps_per_epoch;
  round_base = static_cast<int64_t>(options.round) * epochs_per_round * steps_per_epoch;
  budgeted = spec.training().time_budget_minutes() > 0;
  if (budgeted && options.round_steps > MaxRoundSteps()) {
    return Status::InvalidArgument("the round's step count " + std::to_string(options.round_steps) +
                                   " is more than its " + std::to_string(MaxRoundSteps()) +
                                   " steps (training.epochs_per_round x " +
                                   std::to_string(steps_per_epoch) + " steps per epoch)");
  }
  return Status::Ok();
}

Status Trainer::Impl::Init() {
  clock = options.clock;
  if (!clock) clock = [] { return SecondsBetween(Clock::time_point(), Clock::now()); };
  setup_start = clock();
  MLCD_RETURN_IF_ERROR(ResolveSpec());

  int threads = options.threads > 0 ? options.threads : spec.training().threads_per_worker();
  if (threads > 0) {
    at::set_num_threads(threads);
    SetBlasThreads(threads);  // OpenBLAS keeps its own pool (common/blas_env.h)
  }
  torch::manual_seed(spec.training().seed());
  MLCD_ASSIGN_OR_RETURN(device, ResolveDevice(options.device, options.rank));
  MLCD_ASSIGN_OR_RETURN(precision, ParsePrecision(spec.training().precision()));

  MLCD_ASSIGN_OR_RETURN(vit_options, VitOptionsFromSpec(spec.model()));
  // Before the data, the label store or the gang: a model this rank cannot hold alone fails
  // here; the share of ranks on one host is checked once the gang is joined.
  MLCD_RETURN_IF_ERROR(CheckTrainingMemory(1));
  MLCD_ASSIGN_OR_RETURN(dataset, OpenImageDataset(spec.dataset(), "train", 0, &spec.model()));
  if (vit_options.channels != dataset->channels()) {
    return Status::InvalidArgument("model.channels is " + std::to_string(vit_options.channels) +
                                   " but " + dataset->Describe() + " has " +
                                   std::to_string(dataset->channels()) + " channels");
  }

  MLCD_RETURN_IF_ERROR(SetUpSchedule());

  if (needs_labels) MLCD_RETURN_IF_ERROR(CheckLabelSet());
  return JoinAndBuild();
}

// The label set must be the one the spec describes.
Status Trainer::Impl::CheckLabelSet() {
  labelstore::LabelStoreClientOptions client_options;
  client_options.timeout =
      std::chrono::seconds(std::max(30, spec.training().collective_timeout_seconds()));
  labels_client =
      std::make_unique<labelstore::LabelStoreClient>(options.labelstore_address, client_options);
  MLCD_ASSIGN_OR_RETURN(v1::LabelSetInfo info, labels_client->Describe(options.label_set));
  const auto& cl = spec.clustering();
  if (info.num_classes() != cl.k() || info.labels_per_sample() != cl.l()) {
    return Status::FailedPrecondition("label set '" + options.label_set +
                                      "' has k=" + std::to_string(info.num_classes()) +
                                      ", l=" + std::to_string(info.labels_per_sample()) +
                                      " but the spec says clustering.k=" + std::to_string(cl.k()) +
                                      ", clustering.l=" + std::to_string(cl.l()));
  }
  if (info.num_samples() < static_cast<uint64_t>(dataset->size())) {
    return Status::FailedPrecondition(
        "label set '" + options.label_set + "' holds labels for " +
        std::to_string(info.num_samples()) + " samples but the training set has " +
        std::to_string(dataset->size()) + " (" + dataset->Describe() +
        "); write labels for every sample id 0.." + std::to_string(dataset->size() - 1));
  }
  if (info.state() != v1::LABEL_SET_STATE_SEALED) {
    MLCD_LOG(WARNING) << "label set '" << options.label_set
                      << "' is not sealed; it may still change";
  }
  return Status::Ok();
}

// Joins the gang, then builds or restores the model and the objective.
Status Trainer::Impl::JoinAndBuild() {
  CollectivesOptions copts;
  copts.rank = options.rank;
  copts.world_size = options.world_size;
  copts.rendezvous = options.rendezvous;
  copts.timeout = std::chrono::seconds(spec.training().collective_timeout_seconds());
  copts.store_prefix = options.store_prefix;
  // One group on the rank's device: NCCL on CUDA (the backbone's gradients and the device
  // layer), Gloo on the CPU.
  copts.device = device;
  if (options.world_size > 1 && options.rendezvous.empty()) {
    return Status::InvalidArgument("world size " + std::to_string(options.world_size) +
                                   " needs --rendezvous HOST:PORT (rank 0's TCPStore)");
  }
  MLCD_ASSIGN_OR_RETURN(comm, Collectives::Create(copts));

  checkpoint_root =
      options.checkpoint_dir.empty() ? spec.training().checkpoint_dir() : options.checkpoint_dir;
  if (options.metrics) {
    metrics = std::make_unique<TrainMetrics>(options.metrics->registry(),
                                             options.job_id.empty() ? "standalone" : options.job_id,
                                             options.round, options.rank, spec.loss().variant());
  }
  const auto& o = spec.optimizer();
  lr.peak_lr = o.lr();
  lr.warmup_fraction = o.warmup_fraction();
  // Provisional with a budget; an MCL stage runs a schedule of its own.
  lr.total_steps = budgeted || spec.has_mcl() ? MaxRoundSteps() : job_total_steps;
  MLCD_ASSIGN_OR_RETURN(lr.decay, ParseLrDecay(o.schedule()));
  if (o.name() != "adamw") {
    return Status::InvalidArgument("optimizer.name \"" + o.name() +
                                   "\" is not supported by the worker; use adamw");
  }
  return RestoreOrInitialise();
}

Status Trainer::Impl::CheckTrainingMemory(int ranks_on_host) const {
  ModelMemoryPlan plan;
  plan.vit = vit_options;
  plan.use = ModelUse::kTraining;
  plan.world = options.world_size;
  // Rows: every view of an image is a row of the forward.
  plan.global_batch = static_cast<int64_t>(spec.training().batch_size()) * views;
  plan.batch = (plan.global_batch + plan.world - 1) / plan.world;
  plan.num_classes = class_centres ? spec.clustering().k() : 0;
  plan.sample_ratio = spec.loss().sample_ratio();
  plan.labels_per_sample = spec.clustering().l();
  plan.ranks_on_host = ranks_on_host;
  plan.precision = precision;
  return CheckModelMemory(plan, device);
}

// A checkpoint of this run's own round continues only the same sample order and label set.
Status Trainer::Impl::CheckSameRoundCheckpoint(const CheckpointMeta& meta) const {
  if (meta.num_samples != schedule.num_samples ||
      meta.global_batch_size != schedule.global_batch_size ||
      meta.steps_per_epoch != steps_per_epoch) {
    return Status::FailedPrecondition(
        "checkpoint " + resumed_from + " was written for " + std::to_string(meta.num_samples) +
        " samples, global batch " + std::to_string(meta.global_batch_size) + ", " +
        std::to_string(meta.steps_per_epoch) + " steps per epoch; this run has " +
        std::to_string(schedule.num_samples) + ", " + std::to_string(schedule.global_batch_size) +
        ", " + std::to_string(steps_per_epoch) +
        ": the sample order would not continue (dataset.limit, " +
        "training.batch_size and training.max_steps_per_epoch must match)");
  }
  if (meta.label_set != options.label_set) {
    return Status::FailedPrecondition("checkpoint " + resumed_from + " trained on label set '" +
                                      meta.label_set + "' but this run of the same round uses '" +
                                      options.label_set + "'");
  }
  return Status::Ok();
}

// The objective of the spec's loss family (worker/train/objective_factory.h).
Status Trainer::Impl::MakeObjective() {
  ObjectiveContext context;
  context.vit = vit_options;
  context.round = options.round;
  context.device = device;
  context.precision = precision;
  context.job_total_steps = job_total_steps;
  context.comm = comm.get();
  MLCD_ASSIGN_OR_RETURN(objective, ObjectiveFromSpec(spec, context));
  classification = dynamic_cast<PartialFcObjective*>(objective.get());
  return Status::Ok();
}

Status Trainer::Impl::RestoreOrInitialise() {
  // The gang's ranks on this host share its free memory (model_memory.h).
  MLCD_ASSIGN_OR_RETURN(int ranks_on_host, RanksOnThisHost(comm.get()));
  if (ranks_on_host > 1) MLCD_RETURN_IF_ERROR(CheckTrainingMemory(ranks_on_host));
  model = VisionTransformer(vit_options);
  // MCL stages after the first start from an initialisation of their own.
  model->ResetParameters(
      spec.has_mcl() && options.round > 0
          ? StreamSeed(spec.training().seed(), static_cast<uint64_t>(options.round))
          : spec.training().seed());
  CheckpointMeta meta;
  bool resume = !options.resume.empty();
  if (resume) {
    MLCD_ASSIGN_OR_RETURN(resumed_from, ResolveCheckpoint(options.resume));
    MLCD_ASSIGN_OR_RETURN(meta, ReadCheckpointMeta(resumed_from));
    if (meta.round > options.round) {
      return Status::FailedPrecondition("checkpoint " + resumed_from + " is from round " +
                                        std::to_string(meta.round) + ", after this run's round " +
                                        std::to_string(options.round));
    }
    if (meta.round == options.round) MLCD_RETURN_IF_ERROR(CheckSameRoundCheckpoint(meta));
    MLCD_RETURN_IF_ERROR(LoadBackboneWeights(resumed_from, model));
    MLCD_RETURN_IF_ERROR(LoadRngState(resumed_from));
  }
  // Initialised or loaded on the host in a fixed order (identical on every device), then
  // moved; the flat buffers and the optimizer state follow the parameters' device.
  model->to(device);
  flat = std::make_unique<FlatParameters>(std::vector<std::vector<torch::Tensor>>{
      model->DecayParameters(), model->NoDecayParameters()});
  BackboneAdamWOptions aopts;
  aopts.beta1 = spec.optimizer().beta1();
  aopts.beta2 = spec.optimizer().beta2();
  aopts.weight_decay = {spec.optimizer().weight_decay(), 0.0};
  aopts.grad_clip_norm = spec.optimizer().grad_clip_norm();
  optimizer = std::make_unique<BackboneAdamW>(flat.get(), aopts);
  if (resume)
    MLCD_RETURN_IF_ERROR(LoadBackboneOptimizer(resumed_from, model, flat.get(), optimizer.get()));
  GradSyncOptions sync_options;
  sync_options.forward_position = ForwardPositions(*model, *flat);
  grad_sync = std::make_unique<GradSync>(comm.get(), flat.get(), sync_options);
  // Every rank initialised (or loaded) the same weights; the broadcast makes sure of it.
  MLCD_RETURN_IF_ERROR(grad_sync->BroadcastParameters());

  MLCD_RETURN_IF_ERROR(MakeObjective());
  TrainStepParts parts;
  parts.model = model;
  parts.flat = flat.get();
  parts.optimizer = optimizer.get();
  parts.grad_sync = grad_sync.get();
  parts.objective = objective.get();
  parts.pixels = {dataset->mean(), dataset->stddev()};
  step = std::make_unique<TrainStep>(parts, device, precision);

  if (resume && meta.round == options.round) {
    if (classification) {
      const PartialFcOptions& popts = classification->layer().options();
      if (meta.num_classes != popts.num_classes || meta.embedding_dim != popts.embedding_dim) {
        return Status::FailedPrecondition(
            "checkpoint " + resumed_from + " has " + std::to_string(meta.num_classes) +
            " class centres of size " + std::to_string(meta.embedding_dim) + "; this run needs " +
            std::to_string(popts.num_classes) + " of size " + std::to_string(popts.embedding_dim));
      }
    }
    MLCD_RETURN_IF_ERROR(objective->Load(resumed_from));
    schedule.first_epoch = meta.next_epoch();
    schedule.first_step = meta.next_step_in_epoch();
    if (schedule.first_epoch != options.first_epoch || schedule.first_step != 0) {
      MLCD_LOG(INFO) << "resuming at round " << options.round << " epoch " << schedule.first_epoch
                     << " step " << schedule.first_step << " from " << resumed_from
                     << " (the assignment said epoch " << options.first_epoch << ")";
    }
    if (schedule.first_epoch > schedule.end_epoch) schedule.first_epoch = schedule.end_epoch;
    if (schedule.first_epoch >= schedule.end_epoch) schedule.first_step = 0;
  } else if (classification) {
    bool from_centroids = false;
    MLCD_RETURN_IF_ERROR(InitCentresFromCentroids(spec, options.round, options.centroids_path,
                                                  &classification->layer(), &from_centroids));
    const std::string centres =
        from_centroids ? "class centres from the k-means centroids " + options.centroids_path
                       : "random class centres";
    if (resume) {
      MLCD_LOG(INFO) << "round " << options.round << " starts from the backbone of " << resumed_from
                     << " (round " << meta.round << ") with " << centres << " for label set '"
                     << options.label_set << "'";
    } else if (from_centroids) {
      MLCD_LOG(INFO) << "round " << options.round << " starts with " << centres;
    }
  }
  if (budgeted) {
    StartBudgetedRound(resume ? &meta : nullptr);
  } else if (spec.has_mcl()) {
    StartStage(resume ? &meta : nullptr);
  }
  MLCD_RETURN_IF_ERROR(ValidateSchedule(schedule));
  summary.first_global_step = GlobalStep(schedule.first_epoch, schedule.first_step);
  summary.global_step = summary.first_global_step;
  summary.last_checkpoint = resumed_from;
  MLCD_LOG(INFO) << "rank " << options.rank << "/" << options.world_size << " ("
                 << comm->backend_name() << "), " << device << ", " << PrecisionName(precision)
                 << ", " << at::get_num_threads() << " threads; model "
                 << DescribeVitOptions(vit_options) << " (" << model->NumParameters()
                 << " parameters); " << dataset->Describe() << "; " << objective->Describe() << "; "
                 << steps_per_epoch << " steps per epoch, " << job_total_steps << " in the job";
  return Status::Ok();
}

StatusOr<std::string> Trainer::Impl::Checkpoint(const StepPosition& position,
                                                int64_t steps_done_in_epoch, bool round_end) {
  const auto start = Clock::now();
  CheckpointState state;
  state.meta.round = position.round;
  state.meta.epoch = position.epoch;
  state.meta.step_in_epoch = steps_done_in_epoch;
  state.meta.steps_per_epoch = steps_per_epoch;
  // The round's last step (time budget) ends its last epoch, partial or not.
  state.meta.epoch_complete = steps_done_in_epoch >= steps_per_epoch || round_end;
  state.meta.global_step = GlobalStep(position.epoch, steps_done_in_epoch);
  state.meta.world_size = options.world_size;
  state.meta.num_classes = class_centres ? spec.clustering().k() : 0;
  state.meta.embedding_dim = vit_options.embed_dim;
  state.meta.label_set = options.label_set;
  state.meta.seed = spec.training().seed();
  state.meta.num_samples = schedule.num_samples;
  state.meta.global_batch_size = schedule.global_batch_size;
  state.spec = &spec;
  state.model = model;
  state.flat = flat.get();
  state.optimizer = optimizer.get();
  state.objective = objective.get();
  state.job_id = options.job_id;
  // Pruning keeps the coordinator's last commit and everything after it (the agent's file names
  // it; until then the checkpoint this run resumed from is the last commit).
  CheckpointRetention retention;
  retention.keep_last = options.keep_checkpoints;
  retention.resumed_from = resumed_from;
  retention.committed_file = options.committed_checkpoint_file;
  auto path = WriteCheckpoint(checkpoint_root, state, comm.get(), retention);
  if (!path.ok())
    return path.status().WithContext("checkpoint at global step " +
                                     std::to_string(state.meta.global_step));
  const double seconds = SecondsBetween(start, Clock::now());
  if (metrics) metrics->RecordCheckpoint(seconds);
  summary.last_checkpoint = *path;
  MLCD_LOG(INFO) << "checkpoint " << *path << " (" << Fixed(seconds, 2) << " s)";
  Emit(json{{"event", "checkpoint"},
            {"path", *path},
            {"round", position.round},
            {"epoch", position.epoch},
            {"step_in_epoch", steps_done_in_epoch},
            {"global_step", state.meta.global_step},
            {"epoch_complete", state.meta.epoch_complete},
            {"seconds", seconds}});
  return path;
}

// The label prefetcher and the image loader of this run (the same schedule).
LabelPrefetcherOptions Trainer::Impl::PrefetcherOptions() const {
  LabelPrefetcherOptions popts;
  popts.client = labels_client.get();
  popts.label_set = options.label_set;
  popts.labels_per_sample = spec.clustering().l();
  popts.schedule = schedule;
  popts.depth = spec.training().label_prefetch_depth();
  return popts;
}

BatchLoaderOptions Trainer::Impl::LoaderOptions() const {
  BatchLoaderOptions lopts;
  lopts.dataset = dataset.get();
  lopts.schedule = schedule;
  lopts.augment.enabled = spec.dataset().augment();
  lopts.augment.seed = spec.training().seed();
  const v1::DatasetSpec& d = spec.dataset();
  lopts.augment.crop_min_scale = d.crop_min_scale();
  lopts.augment.horizontal_flip = d.horizontal_flip();
  lopts.augment.color_jitter_prob = d.color_jitter_prob();
  lopts.augment.jitter_brightness = d.jitter_brightness();
  lopts.augment.jitter_contrast = d.jitter_contrast();
  lopts.augment.jitter_saturation = d.jitter_saturation();
  lopts.augment.jitter_hue = d.jitter_hue();
  lopts.augment.grayscale_prob = d.grayscale_prob();
  lopts.views = views;
  lopts.image_size = vit_options.image_size;
  lopts.queue_depth = 2;
  lopts.pin_memory = device.is_cuda();
  lopts.images_as_bytes = device.is_cuda();
  return lopts;
}

// The objective's figures in the step's log line.
std::string Trainer::Impl::ObjectiveFigures(const StepReport& report) const {
  std::ostringstream out;
  out << std::setprecision(5);
  if (class_centres) {
    out << " pos/neg cos " << report.mean_positive_cosine << "/" << report.mean_negative_cosine;
  } else {
    out << " positives/anchor " << report.mean_positives << ", anchors without "
        << report.anchors_without_positives;
  }
  return out.str();
}

// The progress event of a finished step and, every options.log_every steps, its log line.
void Trainer::Impl::AnnounceStep(const StepPosition& pos, const StepReport& report, double loss,
                                 bool last_batch) {
  json event{{"event", "progress"},
             {"round", pos.round},
             {"epoch", pos.epoch},
             {"step_in_epoch", pos.step_in_epoch + 1},
             {"steps_per_epoch", steps_per_epoch},
             {"global_step", report.global_step},
             {"loss", loss},
             {"samples_per_second", report.samples_per_second},
             {"learning_rate", report.learning_rate},
             {"label_wait_seconds", report.timings.label_wait},
             {"step_seconds", report.timings.step},
             {"bad_samples", report.bad_so_far.distinct},
             {"bad_sample_keys", report.bad_so_far.first_keys}};
  // The objective's own figures: the class centres' cosines, or the contrastive positives.
  if (class_centres) {
    event["mean_positive_cosine"] = report.mean_positive_cosine;
    event["mean_negative_cosine"] = report.mean_negative_cosine;
  } else {
    event["mean_positives"] = report.mean_positives;
    event["anchors_without_positives"] = report.anchors_without_positives;
  }
  Emit(event);
  if (options.log_every > 0 && (summary.steps_run % options.log_every == 0 || last_batch)) {
    MLCD_LOG(INFO) << "round " << pos.round << " epoch " << pos.epoch << " step "
                   << pos.step_in_epoch + 1 << "/" << steps_per_epoch << " global "
                   << report.global_step << "/" << job_total_steps << " loss "
                   << std::setprecision(5) << loss << " lr " << report.learning_rate
                   << ObjectiveFigures(report) << ", " << std::setprecision(4)
                   << report.samples_per_second << " samples/s (backbone "
                   << report.timings.backbone << " s, classification "
                   << report.timings.classification_layer << " s, collectives "
                   << report.timings.collectives << " s, label wait " << report.timings.label_wait
                   << " s, data wait " << report.timings.data_wait << " s)";
  }
}

// The labels of `batch` as [rows, l] int32 viewing `labels` (the batch's replacements of bad
// images applied, one row per view); undefined when no labels are read.
StatusOr<torch::Tensor> Trainer::Impl::LabelRows(const LoadedBatch& batch, BatchLabels* labels) {
  if (labels == nullptr) return torch::Tensor();
  if (labels->ids != batch.ids) return Status::Internal("label and image batches are out of step");
  ApplyReplacements(batch.replaced, labels->labels_per_sample, &labels->labels);  // bad images
  const int64_t n = static_cast<int64_t>(labels->ids.size());
  torch::Tensor rows =
      torch::from_blob(labels->labels.data(), {n, labels->labels_per_sample}, torch::kInt);
  // Rows 2k and 2k+1 are image k's views.
  return views > 1 ? rows.repeat_interleave(views, 0) : rows;
}

Status Trainer::Impl::Run() {
  const auto run_start = Clock::now();
  BatchSchedule plan(schedule);
  const int64_t batches = plan.num_batches();
  Emit(json{{"event", "started"},
            {"rank", options.rank},
            {"world_size", options.world_size},
            {"steps_per_epoch", steps_per_epoch},
            {"job_total_steps", job_total_steps},
            {"round", options.round},
            {"epoch", schedule.first_epoch},
            {"step_in_epoch", schedule.first_step},
            {"global_step", summary.first_global_step},
            {"resumed_from", resumed_from}});

  std::unique_ptr<LabelPrefetcher> prefetcher;
  if (needs_labels) prefetcher = std::make_unique<LabelPrefetcher>(PrefetcherOptions());
  BatchLoader loader(LoaderOptions());
  if (budgeted && round_steps == 0) {
    StepBudgetOptions bopts;
    bopts.budget_seconds = spec.training().time_budget_minutes() * 60;
    bopts.steps_before = RoundStep(schedule.first_epoch, schedule.first_step);
    bopts.max_steps = MaxRoundSteps();
    budget = std::make_unique<StepBudget>(bopts, clock);
    budget->Start(setup_start);
  }

  // The class centres take their own multiplier; a head trains with the backbone's rate.
  const double objective_lr_multiplier =
      classification ? spec.optimizer().centre_lr_multiplier() : 1.0;
  const int64_t every = spec.training().checkpoint_every_steps();
  for (int64_t index = 0; index < batches; ++index) {
    const auto step_start = Clock::now();
    BatchLabels labels;
    if (prefetcher) {
      MLCD_ASSIGN_OR_RETURN(labels, prefetcher->Next());
    }
    const double label_wait = prefetcher ? prefetcher->last_wait_seconds() : 0.0;
    const auto data_start = Clock::now();
    MLCD_ASSIGN_OR_RETURN(LoadedBatch batch, loader.Next());
    const double data_wait = SecondsBetween(data_start, Clock::now());
    MLCD_ASSIGN_OR_RETURN(torch::Tensor label_tensor,
                          LabelRows(batch, prefetcher ? &labels : nullptr));
    const StepPosition pos = batch.position;
    const int64_t global_step = GlobalStep(pos.epoch, pos.step_in_epoch);
    const double step_lr = LearningRateAt(lr, LrStep(pos.epoch, pos.step_in_epoch));

    // MulCon's step 2 runs at a smaller learning rate, the backbone's and the head's alike.
    const double head_factor = objective->learning_rate_multiplier();
    auto result = step->Run(batch.images, label_tensor, step_lr * head_factor,
                            step_lr * head_factor * objective_lr_multiplier);
    if (!result.ok()) {
      return result.status().WithContext("training step at round " + std::to_string(pos.round) +
                                         " epoch " + std::to_string(pos.epoch) + " step " +
                                         std::to_string(pos.step_in_epoch) + " (global step " +
                                         std::to_string(global_step) + ")");
    }
    const ObjectiveStep& out = result->objective;
    const auto step_end = Clock::now();

    StepReport report = StepFigures(*result);
    report.learning_rate = step_lr;
    report.global_step = global_step + 1;
    report.global_batch_size = schedule.global_batch_size;
    report.bad_samples = batch.bad_samples;
    report.bad_so_far = batch.bad_so_far;
    report.timings.step = SecondsBetween(step_start, step_end);
    report.timings.label_wait = label_wait;
    report.timings.data_wait = data_wait;
    report.samples_per_second = schedule.global_batch_size / std::max(1e-9, report.timings.step);
    if (metrics) metrics->RecordStep(report);

    if (summary.steps_run == 0) summary.first_loss = out.loss;
    summary.last_loss = out.loss;
    ++summary.steps_run;
    summary.global_step = global_step + 1;
    if (budget && round_steps == 0) MLCD_RETURN_IF_ERROR(TimeStep());
    const int64_t done = pos.step_in_epoch + 1;
    const bool round_end = round_steps > 0 && RoundStep(pos.epoch, done) >= round_steps;
    AnnounceStep(pos, report, out.loss, index + 1 == batches || round_end);

    const bool epoch_end = done == steps_per_epoch;
    const bool periodic = every > 0 && done % every == 0;
    const bool checkpointed = !checkpoint_root.empty() && (epoch_end || periodic || round_end);
    if (checkpointed) MLCD_RETURN_IF_ERROR(Checkpoint(pos, done, round_end).status());
    if (options.stop_requested && index + 1 < batches && !round_end) {
      MLCD_ASSIGN_OR_RETURN(const bool stop, AgreeToStop(*options.stop_requested, comm.get()));
      if (stop) {
        MLCD_RETURN_IF_ERROR(StopAfter(pos, done, checkpointed));
        break;
      }
    }
    if (round_end) break;
  }
  if (checkpoint_root.empty()) MLCD_LOG(WARNING) << "no checkpoint directory: nothing was saved";
  summary.label_wait_seconds = prefetcher ? prefetcher->total_wait_seconds() : 0.0;
  summary.data_wait_seconds = loader.wait_seconds();
  summary.seconds = SecondsBetween(run_start, Clock::now());
  if (summary.stopped) return Status::Ok();
  MLCD_LOG(INFO) << "finished at global step " << summary.global_step << " after "
                 << summary.steps_run << " steps in " << std::setprecision(4) << summary.seconds
                 << " s (label wait " << summary.label_wait_seconds << " s, data wait "
                 << summary.data_wait_seconds << " s)";
  Emit(json{{"event", "finished"},
            {"global_step", summary.global_step},
            {"checkpoint", summary.last_checkpoint},
            {"steps", summary.steps_run},
            {"label_wait_seconds", summary.label_wait_seconds},
            {"seconds", summary.seconds}});
  return Status::Ok();
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  try {
    MLCD_RETURN_IF_ERROR(impl->Init());
  } catch (const std::exception& e) {
    return Status::Internal(std::string("setting up training failed: ") + e.what());
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Status Trainer::Run() {
  try {
    return impl_->Run();
  } catch (const std::exception& e) {
    return Status::Internal(std::string("training failed: ") + e.what());
  }
}

const TrainerSummary& Trainer::summary() const { return impl_->summary; }

StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  v1::JobSpec spec;
  const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (is_json) {
    auto st = google::protobuf::util::JsonStringToMessage(text, &spec);
    if (!st.ok()) {
      return Status::InvalidArgument(path +
                                     ": not protobuf JSON of mlcd.v1.JobSpec: " + st.ToString());
    }
    Status valid = ValidateJobSpec(&spec);
    if (!valid.ok()) return valid.WithContext(path);
    return spec;
  }
  auto parsed = LoadJobSpecYaml(text);
  if (!parsed.ok()) return parsed.status().WithContext(path);
  return parsed->spec;
}

}  // namespace mlcd::worker
