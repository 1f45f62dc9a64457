#include "worker/eval/stage_concat.h"

#include <cmath>
#include <utility>

namespace mlcd::worker {

StatusOr<std::vector<EmbeddingModel>> LoadStageModels(const std::vector<std::string>& checkpoints,
                                                      const ModelLoadOptions& load) {
  if (checkpoints.empty()) return Status::InvalidArgument("no stage checkpoints to concatenate");
  std::vector<EmbeddingModel> stages;
  for (size_t j = 0; j < checkpoints.size(); ++j) {
    MLCD_ASSIGN_OR_RETURN(EmbeddingModel m, LoadEmbeddingModel(checkpoints[j], nullptr, load));
    if (j > 0) {
      const auto& a = stages[0].spec.model();
      const auto& b = m.spec.model();
      if (a.image_size() != b.image_size() || a.channels() != b.channels()) {
        return Status::FailedPrecondition(
            "stage " + std::to_string(j) + " (" + checkpoints[j] + ") takes " +
            std::to_string(b.channels()) + "-channel images of " + std::to_string(b.image_size()) +
            " pixels, stage 0 " + std::to_string(a.channels()) + "-channel of " +
            std::to_string(a.image_size()) + ": the stages of one job see the same images");
      }
    }
    stages.push_back(std::move(m));
  }
  return stages;
}

StatusOr<FeatureMatrix> ConcatenateStageFeatures(const std::vector<FeatureMatrix>& parts) {
  if (parts.empty()) return Status::InvalidArgument("no stage features to concatenate");
  int64_t cols = 0;
  for (size_t j = 0; j < parts.size(); ++j) {
    if (parts[j].rows != parts[0].rows) {
      return Status::InvalidArgument("stage " + std::to_string(j) + " has " +
                                     std::to_string(parts[j].rows) + " rows, stage 0 " +
                                     std::to_string(parts[0].rows));
    }
    cols += parts[j].cols;
  }
  FeatureMatrix out(parts[0].rows, cols);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(parts.size())));
  int64_t offset = 0;
  for (const FeatureMatrix& part : parts) {
    FeatureMatrix unit = part;
    L2NormalizeRows(&unit);
    for (int64_t i = 0; i < unit.rows; ++i) {
      const float* src = unit.row(i);
      float* dst = out.row(i) + offset;
      for (int64_t c = 0; c < unit.cols; ++c) dst[c] = src[c] * scale;
    }
    offset += part.cols;
  }
  return out;
}

StatusOr<EmbeddedPart> EmbedStages(const std::vector<EmbeddingModel>& stages,
                                   const ImageDataset& dataset, const EmbedOptions& options) {
  if (stages.empty()) return Status::InvalidArgument("no stage models to embed with");
  std::vector<FeatureMatrix> parts;
  EmbeddedPart first;
  double seconds = 0;
  for (size_t j = 0; j < stages.size(); ++j) {
    MLCD_ASSIGN_OR_RETURN(EmbeddedPart part, EmbedDataset(stages[j], dataset, options));
    seconds += part.seconds;
    parts.push_back(std::move(part.features.features));
    if (j == 0) first = std::move(part);
  }
  MLCD_ASSIGN_OR_RETURN(first.features.features, ConcatenateStageFeatures(parts));
  first.seconds = seconds;
  return first;
}

}  // namespace mlcd::worker
