// Prometheus metrics of `mlcd-worker train` (served on --metrics-listen at /metrics). Every
// series carries the labels job_id, round, rank and variant (the loss variant); one process
// trains one (job, round, rank), so none of them grows without bound within a process:
//   mlcd_worker_loss                          gauge      loss of the last step (global batch mean)
//   mlcd_worker_samples_per_second            gauge      global samples/s of the last step
//   mlcd_worker_mean_positive_cosine          gauge      paper Fig. 3 quantities, last step
//   mlcd_worker_mean_negative_cosine          gauge      (classification variants)
//   mlcd_worker_mean_positives                gauge      contrastive variants: mean positives
//                                                        per anchor (last step)
//   mlcd_worker_anchors_without_positives     gauge      contrastive: anchors with none (last step)
//   mlcd_worker_learning_rate                 gauge      backbone lr of the last step
//   mlcd_worker_grad_norm                     gauge      backbone gradient norm before clipping
//   mlcd_worker_global_step                   gauge      optimizer steps of the job so far
//   mlcd_worker_steps_total                   counter    steps taken by this process
//   mlcd_worker_samples_total                 counter    global samples processed by this process
//   mlcd_worker_step_seconds                  histogram  whole step
//   mlcd_worker_backbone_seconds              histogram  ViT forward + backward + optimizer
//   mlcd_worker_classification_layer_seconds  histogram  the objective's compute (PartialFc, or the
//                                                        contrastive loss and head), no collectives
//   mlcd_worker_collective_seconds            histogram  its collectives + gradient allreduce
//   mlcd_worker_label_wait_seconds            histogram  time blocked on the label prefetcher
//   mlcd_worker_data_wait_seconds             histogram  time blocked on the image loader
//   mlcd_worker_checkpoint_seconds            histogram  writing a checkpoint
//   mlcd_worker_start_timestamp_seconds       gauge      unix time this training process started
//   mlcd_worker_last_checkpoint_timestamp_seconds gauge  unix time of the last checkpoint (or
//                                                        of the start: the state resumed from)
//   mlcd_worker_bad_samples_total             counter    images skipped as unreadable (this rank)
// No torch here.
#pragma once

#include <string>

#include "common/metrics.h"
#include "worker/train/bad_samples.h"

namespace mlcd::worker {

struct StepTimings {
  double step = 0;
  double backbone = 0;
  double classification_layer = 0;
  double collectives = 0;
  double label_wait = 0;
  double data_wait = 0;
};

struct StepReport {
  double loss = 0;
  double samples_per_second = 0;
  double mean_positive_cosine = 0;
  double mean_negative_cosine = 0;
  // Contrastive variants (0 for classification): mean positives per anchor, anchors without.
  double mean_positives = 0;
  long long anchors_without_positives = 0;
  double learning_rate = 0;
  double grad_norm = 0;
  long long global_step = 0;
  long long global_batch_size = 0;
  // Images of this rank's batch that could not be decoded (docs/data.md, "Bad images").
  long long bad_samples = 0;
  // The rank's distinct bad samples so far and the keys of the first of them.
  BadSamplesSoFar bad_so_far;
  StepTimings timings;
};

class TrainMetrics {
 public:
  TrainMetrics(prometheus::Registry& registry, const std::string& job_id, int round, int rank,
               const std::string& variant);

  void RecordStep(const StepReport& report);
  void RecordCheckpoint(double seconds);

 private:
  prometheus::Gauge *loss_, *samples_per_second_, *positive_cosine_, *negative_cosine_,
      *mean_positives_, *anchors_without_positives_, *learning_rate_, *grad_norm_, *global_step_,
      *start_time_, *last_checkpoint_time_;
  prometheus::Counter *steps_, *samples_, *bad_samples_;
  prometheus::Histogram *step_seconds_, *backbone_seconds_, *classification_seconds_,
      *collective_seconds_, *label_wait_seconds_, *data_wait_seconds_, *checkpoint_seconds_;
};

}  // namespace mlcd::worker
