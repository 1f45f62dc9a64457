#include "worker/eval/embed.h"

#include "common/log.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/job_spec.h"
#include "common/spec_validation.h"
#include "worker/train/checkpoint.h"

namespace mlcd::worker {

namespace {

// The spec limits of the model section (and its sequence length), which spec.json of a
// checkpoint must meet like a submitted spec; `source` names where the spec came from. The
// channels against a dataset are not a limit (embed and eval check them against the data they
// read), so the dataset formats are left out.
Status CheckModelLimits(v1::JobSpec spec, const std::string& source) {
  spec.mutable_dataset()->clear_format();
  spec.mutable_evaluation()->set_enabled(false);
  std::vector<SpecProblem> model_problems;
  for (SpecProblem& p : JobSpecProblems(spec, ""))
    if (p.path.rfind("model.", 0) == 0) model_problems.push_back(std::move(p));
  return SpecProblemsToStatus(model_problems).WithContext(source);
}

}  // namespace

StatusOr<EmbeddingModel> LoadEmbeddingModel(const std::string& checkpoint, const v1::JobSpec* spec,
                                            const ModelLoadOptions& load) {
  EmbeddingModel out;
  if (!checkpoint.empty()) {
    MLCD_ASSIGN_OR_RETURN(out.checkpoint, ResolveCheckpoint(checkpoint));
    MLCD_ASSIGN_OR_RETURN(out.spec, ReadCheckpointSpec(out.checkpoint));
  } else {
    if (!spec)
      return Status::InvalidArgument(
          "no model: give a checkpoint, or a job spec for a random initialisation");
    out.spec = *spec;
  }
  ApplyJobSpecDefaults(&out.spec);
  MLCD_RETURN_IF_ERROR(CheckModelLimits(
      out.spec, out.checkpoint.empty() ? "the job spec" : out.checkpoint + "/spec.json"));
  MLCD_ASSIGN_OR_RETURN(VitOptions vit, VitOptionsFromSpec(out.spec.model()));
  ModelMemoryPlan memory;
  memory.vit = vit;
  memory.use = load.use;
  memory.batch = load.batch_size;
  memory.ranks_on_host = load.ranks_on_host;
  MLCD_RETURN_IF_ERROR(CheckModelMemory(memory, at::Device(at::kCPU)));
  out.model = VisionTransformer(vit);
  out.model->ResetParameters(out.spec.training().seed());
  if (!out.checkpoint.empty()) {
    Status s = LoadBackboneWeights(out.checkpoint, out.model);
    if (!s.ok()) return s.WithContext("loading the backbone of " + out.checkpoint);
    out.description = "checkpoint " + out.checkpoint + " (" + DescribeVitOptions(vit) + ")";
  } else {
    out.description = "random init, seed " + std::to_string(out.spec.training().seed()) + " (" +
                      DescribeVitOptions(vit) + ")";
  }
  out.model->eval();
  return out;
}

StatusOr<EmbeddedPart> EmbedDataset(const EmbeddingModel& model, const ImageDataset& dataset,
                                    const EmbedOptions& options) {
  auto start = std::chrono::steady_clock::now();
  if (!model.model) return Status::InvalidArgument("embed: no model loaded");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return Status::InvalidArgument("embed: rank " + std::to_string(options.rank) +
                                   " is outside world size " + std::to_string(options.world_size));
  if (options.batch_size < 1)
    return Status::InvalidArgument("embed: batch size must be >= 1, got " +
                                   std::to_string(options.batch_size));
  const VitOptions& vit = model.model->options();
  if (vit.channels != dataset.channels())
    return Status::InvalidArgument("the model takes " + std::to_string(vit.channels) +
                                   "-channel images but " + dataset.Describe() + " has " +
                                   std::to_string(dataset.channels()) + " channels");
  EmbeddedPart part;
  part.total = dataset.size();
  ContiguousPart(part.total, options.rank, options.world_size, &part.begin, &part.end);
  const int64_t rows = part.end - part.begin;
  if (options.features == VitFeatures::kBlocks &&
      (options.feature_blocks < 1 || options.feature_blocks > vit.depth))
    return Status::InvalidArgument("embed: feature blocks " +
                                   std::to_string(options.feature_blocks) +
                                   " outside [1, model depth " + std::to_string(vit.depth) + "]");
  const bool append = options.append_embedding && options.features != VitFeatures::kEmbedding;
  const int64_t feature_dim = model.model->FeatureDim(options.features, options.feature_blocks);
  const int64_t cols = feature_dim + (append ? vit.embed_dim : 0);
  part.features.features = FeatureMatrix(rows, cols);
  const auto& classes = dataset.class_labels();
  AugmentOptions no_augment;
  no_augment.enabled = false;
  torch::NoGradGuard no_grad;
  VisionTransformer net = model.model;
  for (int64_t b = 0; b < rows; b += options.batch_size) {
    if (options.should_stop && options.should_stop()) return Status::Cancelled("embedding stopped");
    const int64_t n = std::min(options.batch_size, rows - b);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = part.begin + b + i;
    // Evaluation transform; an undecodable image takes a neighbour's (and is logged).
    MLCD_ASSIGN_OR_RETURN(PreparedImages prepared,
                          dataset.Prepare(ids, no_augment, 0, 0, vit.image_size));
    for (const BadSample& bad : prepared.bad)
      MLCD_LOG(WARNING) << "bad sample " << bad.id << " ('" << bad.key
                        << "'): its row repeats a neighbour's: " << bad.status.ToString();
    torch::Tensor images = prepared.images;
    torch::Tensor embedding;
    torch::Tensor out = net->Features(images, options.features, options.feature_blocks,
                                      append ? &embedding : nullptr);
    auto unit = [](const torch::Tensor& t) { return t / t.norm(2, {1}, true).clamp_min(1e-12); };
    out = unit(out);
    if (append) out = torch::cat({out, unit(embedding)}, 1);
    out = out.to(torch::kFloat).contiguous();
    std::memcpy(part.features.features.row(b), out.data_ptr<float>(), sizeof(float) * n * cols);
    for (int64_t id : ids) {
      part.features.ids.push_back(id);
      if (!classes.empty()) part.features.labels.push_back(classes[static_cast<size_t>(id)]);
    }
    if (options.on_progress) options.on_progress(b + n, rows);
  }
  for (float v : part.features.features.values) {
    if (!std::isfinite(v))
      return Status::FailedPrecondition("the model produced non-finite embeddings (" +
                                        model.description +
                                        "): the checkpoint is diverged or corrupt");
  }
  part.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return part;
}

}  // namespace mlcd::worker

namespace mlcd::worker {

StatusOr<EmbeddedPart> EmbedImageTensor(const EmbeddingModel& model, const torch::Tensor& images,
                                        const EmbedOptions& options) {
  auto start = std::chrono::steady_clock::now();
  if (!model.model) return Status::InvalidArgument("embed: no model loaded");
  const VitOptions& vit = model.model->options();
  if (images.dim() != 4 || images.size(1) != vit.channels || images.size(2) != vit.image_size ||
      images.size(3) != vit.image_size) {
    std::ostringstream s;
    s << "the model takes images [N, " << vit.channels << ", " << vit.image_size << ", "
      << vit.image_size << "], got " << images.sizes();
    return Status::InvalidArgument(s.str());
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size ||
      options.batch_size < 1)
    return Status::InvalidArgument("embed: rank, world size or batch size out of range");
  EmbeddedPart part;
  part.total = images.size(0);
  ContiguousPart(part.total, options.rank, options.world_size, &part.begin, &part.end);
  const int64_t rows = part.end - part.begin, cols = vit.embed_dim;
  part.features.features = FeatureMatrix(rows, cols);
  torch::NoGradGuard no_grad;
  VisionTransformer net = model.model;
  for (int64_t b = 0; b < rows; b += options.batch_size) {
    const int64_t n = std::min(options.batch_size, rows - b);
    torch::Tensor out = net->forward(images.narrow(0, part.begin + b, n).to(torch::kFloat));
    out = (out / out.norm(2, {1}, true).clamp_min(1e-12)).contiguous();
    std::memcpy(part.features.features.row(b), out.data_ptr<float>(), sizeof(float) * n * cols);
    for (int64_t i = 0; i < n; ++i) part.features.ids.push_back(part.begin + b + i);
    if (options.on_progress) options.on_progress(b + n, rows);
  }
  for (float v : part.features.features.values) {
    if (!std::isfinite(v))
      return Status::FailedPrecondition("non-finite embeddings (" + model.description +
                                        "): the input holds NaN/Inf, or the checkpoint is "
                                        "diverged or corrupt");
  }
  part.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return part;
}

}  // namespace mlcd::worker
