// The classification layer of one training round (worker/train/trainer.cc): its options
// from the job spec and where its class centres start (training.centre_init).
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/enums.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/loss/partial_fc.h"

namespace mlcd::worker {

// The classification layer of round `round` from the spec: fresh centres for every round (the
// round's clusters are new), seeded by (training.seed, round). On a CUDA `device` the device
// layer keeps the shard there (its GEMMs in bf16 under a bf16 precision, UsesBf16); on the
// CPU the fused host layer runs (partial_fc.h).
StatusOr<PartialFcOptions> LayerOptionsFromSpec(const v1::JobSpec& spec, int64_t embedding_dim,
                                                int round, const torch::Device& device,
                                                Precision precision);

// training.centre_init: starts a fresh round's class centres (this rank's range) from the
// round's k-means centroids (`centroids_path`, k x d float32 .npy) when they live in the
// model's embedding space. Sets *used. FAILED_PRECONDITION / INVALID_ARGUMENT naming the file
// when "centroids" was asked for and they do not fit.
Status InitCentresFromCentroids(const v1::JobSpec& spec, int round,
                                const std::string& centroids_path, PartialFc* layer, bool* used);

}  // namespace mlcd::worker
