#include "worker/eval/head_predictions.h"

#include <torch/torch.h>

#include <algorithm>

#include "common/file_util.h"
#include "worker/loss/bce_head.h"
#include "worker/model/head_export.h"
#include "worker/model/label_attention_head.h"
#include "worker/model/safetensors.h"

namespace mlcd::worker {
namespace {

// The head a checkpoint's label_head.safetensors holds: bce (bce_head.* tensors) or mulcon.
struct LoadedHead {
  BceHead bce{nullptr};
  LabelAttentionHead mulcon{nullptr};
  int64_t num_labels = 0;
};

StatusOr<LoadedHead> LoadHead(const SafetensorsFile& file, const VitOptions& vit) {
  LoadedHead head;
  const std::string bce_weight = std::string(kBceHeadPrefix) + "weight";
  auto it = file.tensors.find(bce_weight);
  if (it != file.tensors.end()) {
    const std::vector<int64_t>& shape = it->second.shape;
    if (shape.size() != 2 || shape[1] != vit.embed_dim) {
      return Status::InvalidArgument(bce_weight + " does not take the backbone's embedding of " +
                                     std::to_string(vit.embed_dim));
    }
    head.num_labels = shape[0];
    head.bce = BceHead(vit.embed_dim, head.num_labels);
    MLCD_RETURN_IF_ERROR(LoadHeadTensors(*head.bce, file, kBceHeadPrefix));
    head.bce->eval();
    return head;
  }
  MLCD_ASSIGN_OR_RETURN(head.mulcon, ReadMulconHead(file));
  if (head.mulcon->options().token_dim != vit.width) {
    return Status::InvalidArgument("the mulcon head reads tokens of width " +
                                   std::to_string(head.mulcon->options().token_dim) +
                                   ", the backbone's are " + std::to_string(vit.width));
  }
  head.num_labels = head.mulcon->options().num_labels;
  head.mulcon->eval();
  return head;
}

}  // namespace

StatusOr<std::vector<double>> PredictTestLabels(const EmbeddingModel& model,
                                                const ImageDataset& test, int64_t batch_size) {
  std::vector<double> logits;
  const std::string path = model.checkpoint + "/" + kLabelHeadFile;
  if (model.checkpoint.empty() || !PathExists(path)) return logits;
  const int32_t test_labels = test.annotations().labels.num_labels;
  if (test_labels == 0) return logits;
  if (batch_size < 1) return Status::InvalidArgument("predictions: batch size must be >= 1");
  MLCD_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path));
  const VitOptions& vit = model.model->options();
  auto loaded = LoadHead(file, vit);
  if (!loaded.ok()) return loaded.status().WithContext(path);
  LoadedHead head = *std::move(loaded);
  if (head.num_labels != test_labels) {
    return Status::InvalidArgument(path + " predicts " + std::to_string(head.num_labels) +
                                   " labels but the evaluation's test split has " +
                                   std::to_string(test_labels) +
                                   ": evaluate on a dataset labelled like the training set");
  }
  const bool bce = static_cast<bool>(head.bce);
  // The head runs where the backbone's weights are.
  const torch::Device device = model.model->parameters().front().device();
  if (bce) {
    head.bce->to(device);
  } else {
    head.mulcon->to(device);
  }
  AugmentOptions no_augment;
  no_augment.enabled = false;
  torch::NoGradGuard no_grad;
  VisionTransformer net = model.model;
  const int64_t rows = test.size();
  logits.reserve(static_cast<size_t>(rows * head.num_labels));
  for (int64_t b = 0; b < rows; b += batch_size) {
    const int64_t n = std::min(batch_size, rows - b);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = b + i;
    MLCD_ASSIGN_OR_RETURN(PreparedImages prepared,
                          test.Prepare(ids, no_augment, 0, 0, vit.image_size));
    torch::Tensor embedding, tokens;
    net->Features(prepared.images.to(device), VitFeatures::kEmbedding, 4, &embedding,
                  bce ? nullptr : &tokens);
    torch::Tensor s = bce ? head.bce->forward(embedding.to(torch::kFloat))
                          : head.mulcon->forward(tokens.to(torch::kFloat)).logits;
    s = s.to(torch::kCPU, torch::kDouble).contiguous();
    const double* p = s.data_ptr<double>();
    logits.insert(logits.end(), p, p + s.numel());
  }
  return logits;
}

}  // namespace mlcd::worker
