#include "worker/train/round_layer.h"

#include "common/log.h"
#include "common/npy.h"
#include "worker/train/sample_order.h"

namespace mlcd::worker {

Status InitCentresFromCentroids(const v1::JobSpec& spec, int round,
                                const std::string& centroids_path, PartialFc* layer, bool* used) {
  *used = false;
  const std::string& mode = spec.training().centre_init();
  if (mode == "random") return Status::Ok();
  const bool model_space = round > 0 || spec.clustering().features().kind() == "model";
  if (mode == "auto" && (!model_space || centroids_path.empty())) return Status::Ok();
  if (centroids_path.empty()) {
    return Status::FailedPrecondition(
        "training.centre_init is 'centroids' but no centroids file was given: pass --centroids "
        "FILE (the round's "
        "k-means centroids; the coordinator's assignments carry them)");
  }
  const int64_t k = spec.clustering().k();
  const int64_t d = layer->options().embedding_dim;
  MLCD_ASSIGN_OR_RETURN(MappedNpy centroids, MappedNpy::Open(centroids_path));
  Status shape = centroids.Expect2d({NpyDtype::kFloat32});
  if (shape.ok() && (centroids.rows() != k || centroids.cols() != d)) {
    shape = Status::InvalidArgument(
        centroids_path + " holds " + std::to_string(centroids.rows()) + " x " +
        std::to_string(centroids.cols()) + " centroids but the class centres are " +
        std::to_string(k) + " x " + std::to_string(d) + " (clustering.k x model.embed_dim)");
  }
  if (!shape.ok()) {
    if (mode == "auto") {
      MLCD_LOG(WARNING) << "class centres start at random: " << shape.message();
      return Status::Ok();
    }
    return Status::FailedPrecondition(
        shape.message() +
        "; training.centre_init 'centroids' needs the round to cluster this model's "
        "own embeddings (or use 'auto' / 'random')");
  }
  // Only this rank's rows are read from the mapping.
  const ClassRange range = layer->class_range();
  at::Tensor rows = at::from_blob(const_cast<float*>(centroids.data_as<float>()) + range.begin * d,
                                  {range.size(), d}, at::kFloat);
  if (!at::isfinite(rows).all().item<bool>()) {
    return Status::InvalidArgument(centroids_path + " has NaN or infinite values in rows [" +
                                   std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                   ")");
  }
  layer->weight().copy_(rows);
  *used = true;
  return Status::Ok();
}

StatusOr<PartialFcOptions> LayerOptionsFromSpec(const v1::JobSpec& spec, int64_t embedding_dim,
                                                int round, const torch::Device& device,
                                                Precision precision) {
  PartialFcOptions popts;
  popts.num_classes = spec.clustering().k();
  popts.embedding_dim = embedding_dim;
  popts.sample_ratio = spec.loss().sample_ratio();
  MLCD_ASSIGN_OR_RETURN(popts.variant, ParseLossVariant(spec.loss().variant()));
  MLCD_ASSIGN_OR_RETURN(popts.margin_type, ParseMarginType(spec.loss().margin_type()));
  popts.scale = spec.loss().scale();
  popts.margin = spec.loss().margin();
  popts.seed = HashValues(
      {spec.training().seed(), 0x43454E54ull /* "CENT" */, static_cast<uint64_t>(round)});
  popts.beta1 = spec.optimizer().beta1();
  popts.beta2 = spec.optimizer().beta2();
  popts.weight_decay = spec.optimizer().weight_decay();
  if (device.is_cuda()) {
    popts.layer = PartialFcLayer::kDevice;
    popts.device = device;
    popts.bf16_gemm = UsesBf16(precision);
  }
  return popts;
}

}  // namespace mlcd::worker
