#include "worker/train/training_curves.h"

#include <vector>

#include "common/log.h"

namespace mlcd::worker {
namespace {

float Value(const nlohmann::json& event, const char* key) {
  auto it = event.find(key);
  return it != event.end() && it->is_number() ? it->get<float>() : 0.0f;
}

}  // namespace

StatusOr<std::unique_ptr<TrainingCurves>> TrainingCurves::Create(
    const TrainingCurvesOptions& options) {
  if (options.every_steps < 1)
    return Status::InvalidArgument("training.tensorboard_every_steps is " +
                                   std::to_string(options.every_steps) + "; use 1 or more");
  MLCD_ASSIGN_OR_RETURN(auto writer, EventFileWriter::Create(options.tensorboard_dir + "/train",
                                                             "train", options.file));
  return std::unique_ptr<TrainingCurves>(new TrainingCurves(options, std::move(writer)));
}

TrainingCurves::TrainingCurves(const TrainingCurvesOptions& options,
                               std::unique_ptr<EventFileWriter> writer)
    : options_(options), writer_(std::move(writer)) {}

void TrainingCurves::OnEvent(const nlohmann::json& event) {
  if (failed_) return;
  const std::string kind = event.value("event", "");
  if (kind == "progress") {
    const auto step = event.value("global_step", int64_t{0});
    if (step % options_.every_steps == 0) {
      Write(event);
      last_progress_ = nullptr;
    } else {
      last_progress_ = event;
    }
  } else if (kind == "finished" || kind == "stopped") {
    if (!last_progress_.is_null()) Write(last_progress_);
    last_progress_ = nullptr;
    if (!failed_) Check(writer_->Flush());
  }
}

void TrainingCurves::Write(const nlohmann::json& p) {
  const float lr = Value(p, "learning_rate");
  const std::vector<EventScalar> scalars = {
      {"train/loss", Value(p, "loss")},
      {"train/learning_rate", lr},
      {"train/centre_learning_rate", lr * static_cast<float>(options_.centre_lr_multiplier)},
      {"train/step_seconds", Value(p, "step_seconds")},
      {"train/images_per_second", Value(p, "samples_per_second")},
  };
  Check(writer_->WriteScalars(p.value("global_step", int64_t{0}), scalars));
}

void TrainingCurves::Check(const Status& status) {
  if (status.ok()) return;
  failed_ = true;
  MLCD_LOG(WARNING) << "TensorBoard curves stop: " << status.ToString();
}

Status TrainingCurves::Close() { return writer_->Close(); }

}  // namespace mlcd::worker
