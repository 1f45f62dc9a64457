// Rank 0's TensorBoard scalars of training (docs/metrics.md, "TensorBoard"): the trainer's
// "progress" events (worker/train/trainer.h) written into an event file of its own
// (common/event_file.h) in the run <tensorboard_dir>/train/, every `every_steps` optimizer
// steps (training.tensorboard_every_steps) and at the last step of the run ("finished" or
// "stopped"). Tags, at step = the job's global optimizer step:
//   train/loss, train/learning_rate (the backbone's), train/centre_learning_rate
//   (learning_rate * optimizer.centre_lr_multiplier), train/step_seconds,
//   train/images_per_second.
// A restarted gang opens a new file; TensorBoard reads a run's files in name (time) order.
// Writing never fails training: the first error is logged and the curves stop.
// No torch. Not thread-safe: the trainer's thread calls OnEvent.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "common/event_file.h"
#include "common/status.h"

namespace mlcd::worker {

struct TrainingCurvesOptions {
  std::string tensorboard_dir;  // the job's; the file goes to <it>/train/
  int every_steps = 10;         // >= 1
  double centre_lr_multiplier = 1;
  EventFileOptions file;
};

class TrainingCurves {
 public:
  // Creates the event file. Errors name the path.
  static StatusOr<std::unique_ptr<TrainingCurves>> Create(const TrainingCurvesOptions& options);

  // Every trainer event; writes the "progress" events of the sampled steps and, at
  // "finished" / "stopped", the run's last step if it was not sampled, then flushes.
  void OnEvent(const nlohmann::json& event);
  // Flushes, fsyncs and closes the file.
  Status Close();

  const std::string& path() const { return writer_->path(); }

 private:
  TrainingCurves(const TrainingCurvesOptions& options, std::unique_ptr<EventFileWriter> writer);
  void Write(const nlohmann::json& progress);
  void Check(const Status& status);

  TrainingCurvesOptions options_;
  std::unique_ptr<EventFileWriter> writer_;
  nlohmann::json last_progress_;  // the latest progress event not written
  bool failed_ = false;
};

}  // namespace mlcd::worker
