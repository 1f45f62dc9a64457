// The coordinator's side of clustering.engine "gang", where the workers' CLUSTER and
// ASSIGN_LABELS gangs do the k-means and the labelling: planning a round's features for the
// gang (here), and taking the gangs' results into the job (JobManager::FinishClusteringGang,
// job_manager.h, defined in gang_clustering.cc). Creating the round's label set before the
// labelling gang and sealing it after are PhaseRunner's PREPARING_SET and SEALING phases
// (phase_runner.h).
#pragma once

#include "common/data_roots.h"
#include "common/status.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// The round's feature paths as the gang's files (directories listed, confined to `roots`,
// null: unconfined), every one a 2-d float32/float16 .npy of the same dimension, or the
// round-0 features the gang computes (their dataset's row count and dimension); rewrites
// round->feature_paths to the listed files. Refuses fewer than k rows in all
// (INVALID_ARGUMENT) and k centroids above kMaxGangCentroidBytes (RESOURCE_EXHAUSTED), naming
// the numbers.
Status PlanGangFeatures(int k, const DataRoots* roots, v1::RoundStatus* round);

}  // namespace mlcd::coordinator
