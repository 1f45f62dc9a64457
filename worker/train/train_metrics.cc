#include "worker/train/train_metrics.h"

namespace mlcd::worker {
namespace {

using Labels = std::map<std::string, std::string>;

prometheus::Gauge* MakeGauge(prometheus::Registry& r, const char* name, const char* help,
                             const Labels& labels) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Counter* MakeCounter(prometheus::Registry& r, const char* name, const char* help,
                                 const Labels& labels) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Histogram* MakeHistogram(prometheus::Registry& r, const char* name, const char* help,
                                     const Labels& labels) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(labels,
                                                                             LatencyBuckets());
}

}  // namespace

TrainMetrics::TrainMetrics(prometheus::Registry& r, const std::string& job_id, int round, int rank,
                           const std::string& variant) {
  const Labels l{{"job_id", job_id},
                 {"round", std::to_string(round)},
                 {"rank", std::to_string(rank)},
                 {"variant", variant}};
  loss_ = MakeGauge(r, "mlcd_worker_loss",
                    "Loss of the last training step (mean over the global batch).", l);
  samples_per_second_ = MakeGauge(r, "mlcd_worker_samples_per_second",
                                  "Global training samples per second of the last step.", l);
  positive_cosine_ =
      MakeGauge(r, "mlcd_worker_mean_positive_cosine",
                "Mean cosine between embeddings and their positive class centres (last step).", l);
  negative_cosine_ = MakeGauge(
      r, "mlcd_worker_mean_negative_cosine",
      "Mean cosine between embeddings and sampled negative class centres (last step).", l);
  mean_positives_ = MakeGauge(
      r, "mlcd_worker_mean_positives",
      "Contrastive variants: mean number of positives per anchor (last step; 0 otherwise).", l);
  anchors_without_positives_ = MakeGauge(
      r, "mlcd_worker_anchors_without_positives",
      "Contrastive variants: anchors of the global batch without a positive (last step).", l);
  learning_rate_ =
      MakeGauge(r, "mlcd_worker_learning_rate", "Backbone learning rate of the last step.", l);
  grad_norm_ = MakeGauge(r, "mlcd_worker_grad_norm",
                         "Backbone gradient norm before clipping (last step).", l);
  global_step_ =
      MakeGauge(r, "mlcd_worker_global_step", "Optimizer steps of the job so far (all rounds).", l);
  steps_ = MakeCounter(r, "mlcd_worker_steps_total", "Training steps taken by this process.", l);
  samples_ = MakeCounter(r, "mlcd_worker_samples_total",
                         "Global batch samples processed by this process.", l);
  step_seconds_ = MakeHistogram(r, "mlcd_worker_step_seconds", "Wall time of a training step.", l);
  backbone_seconds_ = MakeHistogram(r, "mlcd_worker_backbone_seconds",
                                    "ViT forward, backward and optimizer time per step.", l);
  classification_seconds_ = MakeHistogram(
      r, "mlcd_worker_classification_layer_seconds",
      "The objective's compute per step (the PartialFc layer, or the contrastive loss "
      "and its head), without collectives.",
      l);
  collective_seconds_ = MakeHistogram(
      r, "mlcd_worker_collective_seconds",
      "Collectives per step: the objective's exchanges and the gradient allreduce.", l);
  label_wait_seconds_ =
      MakeHistogram(r, "mlcd_worker_label_wait_seconds",
                    "Time a step waited for its labels from the label store (prefetch stall).", l);
  data_wait_seconds_ = MakeHistogram(r, "mlcd_worker_data_wait_seconds",
                                     "Time a step waited for its images (loader stall).", l);
  checkpoint_seconds_ =
      MakeHistogram(r, "mlcd_worker_checkpoint_seconds", "Wall time of writing a checkpoint.", l);
  start_time_ = MakeGauge(r, "mlcd_worker_start_timestamp_seconds",
                          "Unix time this training process started (a fresh gang is young).", l);
  start_time_->SetToCurrentTime();
  last_checkpoint_time_ =
      MakeGauge(r, "mlcd_worker_last_checkpoint_timestamp_seconds",
                "Unix time of the gang's last checkpoint, or of this process's start (the state it "
                "resumed from is saved): time() minus it is what a crash would lose.",
                l);
  last_checkpoint_time_->SetToCurrentTime();
  bad_samples_ = MakeCounter(r, "mlcd_worker_bad_samples_total",
                             "Images this rank skipped because they could not be read or "
                             "decoded (each replaced by a good image of its batch).",
                             l);
}

void TrainMetrics::RecordStep(const StepReport& s) {
  loss_->Set(s.loss);
  samples_per_second_->Set(s.samples_per_second);
  positive_cosine_->Set(s.mean_positive_cosine);
  negative_cosine_->Set(s.mean_negative_cosine);
  mean_positives_->Set(s.mean_positives);
  anchors_without_positives_->Set(static_cast<double>(s.anchors_without_positives));
  learning_rate_->Set(s.learning_rate);
  grad_norm_->Set(s.grad_norm);
  global_step_->Set(static_cast<double>(s.global_step));
  steps_->Increment();
  samples_->Increment(static_cast<double>(s.global_batch_size));
  step_seconds_->Observe(s.timings.step);
  backbone_seconds_->Observe(s.timings.backbone);
  classification_seconds_->Observe(s.timings.classification_layer);
  collective_seconds_->Observe(s.timings.collectives);
  label_wait_seconds_->Observe(s.timings.label_wait);
  data_wait_seconds_->Observe(s.timings.data_wait);
  bad_samples_->Increment(static_cast<double>(s.bad_samples));
}

void TrainMetrics::RecordCheckpoint(double seconds) {
  checkpoint_seconds_->Observe(seconds);
  last_checkpoint_time_->SetToCurrentTime();
}

}  // namespace mlcd::worker
