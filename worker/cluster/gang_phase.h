// One rank's part of a clustering.engine "gang" phase, from its assignment
// (coordinator.proto, Assignment; docs/clusterd.md, "The gang engine"):
//
//   CLUSTER        k-means of the round's feature rows (gang_kmeans.h) with the spec's k,
//                  niter, max_points_per_centroid and seed (+ round, as clusterd is asked),
//                  checkpointing the centroids beside centroids_path every
//                  kGangCheckpointEvery iterations (a retried gang resumes from it); rank 0
//                  writes centroids_path and returns the ClusterResult.
//   ASSIGN_LABELS  every rank writes the top-l labels and scores of its rows (gang_assign.h)
//                  into the OPEN label set the coordinator created for this attempt,
//                  concurrently; the sizes and label quality are reduced over ranks and every
//                  rank returns the same AssignResult. The coordinator seals the set once
//                  every rank has reported (and deletes a failed attempt's partial set before
//                  the next attempt writes).
//
// Rank r of W holds the contiguous global rows EvenSplitBegin(n, W, r) ... (gang_layout.h).
// A gang member may write a job's OPEN set by its own role (labelstore/ownership.h).
// Before any collective the rank checks that its rows, the centroids, the accumulators and
// one search chunk fit the memory its device has free (RESOURCE_EXHAUSTED naming the bytes,
// what is free and the world size that would fit).
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "mlcd/v1/clusterd.pb.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::worker::cluster {

inline constexpr int kGangCheckpointEvery = 5;

struct GangPhaseOptions {
  // "cpu", "cuda", "cuda:N" or "auto" (a CUDA device when there is one).
  std::string device = "auto";
  // Intra-op threads (0 = leave ATen's default).
  int threads = 0;
  // Receives progress events (docs/contracts.md): {"event": "progress", "phase": ..., ...}.
  std::function<void(const nlohmann::json&)> emit;
};

struct GangPhaseResult {
  v1::ClusterResult cluster;  // CLUSTER (rank 0)
  v1::AssignResult assign;    // ASSIGN_LABELS (every rank)
};

StatusOr<GangPhaseResult> RunGangPhase(const v1::Assignment& assignment,
                                       const GangPhaseOptions& options);

}  // namespace mlcd::worker::cluster
