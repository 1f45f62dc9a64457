#include "coordinator/gang_clustering.h"

#include "common/dataset/feature_keys.h"
#include "common/fashion_mnist_features.h"
#include "common/format.h"
#include "common/limits.h"
#include "coordinator/dataset_checks.h"
#include "coordinator/job_manager.h"
#include "coordinator/phase_runner.h"

namespace mlcd::coordinator {
namespace {

// At least k rows for k-means and centroids that fit a gang rank: INVALID_ARGUMENT /
// RESOURCE_EXHAUSTED naming the numbers. `of` names the rows' source.
Status CheckGangFit(int k, int64_t rows, int64_t d, const std::string& of) {
  if (k > rows) {
    return Status::InvalidArgument("clustering.k = " + std::to_string(k) + " > the " +
                                   std::to_string(rows) + " feature rows of " + of +
                                   "; k-means needs at least k rows: lower k");
  }
  if (static_cast<double>(k) * d * 4 > static_cast<double>(kMaxGangCentroidBytes)) {
    return Status::ResourceExhausted(
        "k = " + std::to_string(k) + " centroids of d = " + std::to_string(d) + " take " +
        FormatBytes(static_cast<uint64_t>(k) * d * 4) +
        " in float32 on every rank of the gang, "
        "above its limit of " +
        FormatBytes(kMaxGangCentroidBytes) + "; lower k, or use engine clusterd (docs/scale.md)");
  }
  return Status::Ok();
}

// The member of rank 0, which reports the gang's result; null when none did.
const v1::GangMember* RankZero(const v1::GangAttempt& attempt) {
  for (const auto& m : attempt.members()) {
    if (m.rank() == 0) return &m;
  }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Planning a round's features.

Status PlanGangFeatures(int k, const DataRoots* roots, v1::RoundStatus* round) {
  if (round->has_generated_features()) {
    const v1::GeneratedFeatures& g = round->generated_features();
    MLCD_ASSIGN_OR_RETURN(FashionMnistFeatureSpec spec, FashionMnistSpecOf(g));
    MLCD_ASSIGN_OR_RETURN(FashionMnistShape shape, ReadFashionMnistShape(spec));
    return CheckGangFit(k, shape.rows, shape.d,
                        "the " + g.kind() + " features of " + shape.images_path);
  }
  std::vector<std::string> paths(round->feature_paths().begin(), round->feature_paths().end());
  MLCD_ASSIGN_OR_RETURN(std::vector<NpyShardRows> shards, ListNpyShardRows(paths, roots));
  int64_t rows = 0, d = -1;
  std::string first;
  round->clear_feature_paths();
  for (const NpyShardRows& shard : shards) {  // each opened and checked 2-d float by the listing
    if (d < 0) {
      d = shard.cols;
      first = shard.path;
    } else if (shard.cols != d) {
      return Status::InvalidArgument(
          "feature dimensions differ: " + first + " has d = " + std::to_string(d) + ", " +
          shard.path + " has d = " + std::to_string(shard.cols) +
          "; every feature file of a round must have the same dimension");
    }
    rows += shard.rows;
    round->add_feature_paths(shard.path);
  }
  return CheckGangFit(k, rows, d, std::to_string(shards.size()) + " shards");
}

// ---------------------------------------------------------------------------------------
// A CLUSTER or ASSIGN_LABELS gang that ended with every member successful.

void JobManager::FinishClusteringGang(JobEntry* job, const v1::GangAttempt& attempt) {
  v1::RoundStatus* round = job->job().mutable_rounds(attempt.round());
  const std::string round_text = RoundText(attempt.round(), job->spec().training().rounds());
  const v1::GangMember* rank0 = RankZero(attempt);
  if (attempt.kind() == v1::ASSIGNMENT_KIND_CLUSTER) {
    if (!rank0 || !rank0->has_cluster() || rank0->cluster().k() != job->spec().clustering().k()) {
      AbortGang(job, "the clustering gang finished but rank 0 reported no k-means result", true);
      return;
    }
    job->rec.clear_attempt();
    job->rec.set_phase_failures(0);
    job->job().mutable_progress()->set_gang_size(0);
    const v1::ClusterResult& result = rank0->cluster();
    *round->mutable_cluster() = result;
    round->set_clustered(true);
    Transition(job, v1::JOB_STATE_ASSIGNING,
               ClusteredMessage(round_text, result, attempt.world_size()));
    return;
  }
  if (!rank0 || !rank0->has_assign()) {
    AbortGang(job, "the label gang finished but rank 0 reported no assignment statistics", true);
    return;
  }
  job->rec.clear_attempt();
  job->rec.set_phase_failures(0);
  job->job().mutable_progress()->set_gang_size(0);
  *round->mutable_assign() = rank0->assign();
  round->set_labels_written(true);
  auto entry =
      jobs_.NewHistory(job, "labels_written",
                       round_text + ": " + std::to_string(rank0->assign().num_samples()) +
                           " samples written into " + RoundLabelSet(job->job(), attempt.round()) +
                           " by " + std::to_string(attempt.world_size()) + " workers; sealing it");
  entry.set_attempt_id(attempt.id());
  jobs_.Persist(job, {entry});
  jobs_.Touch(job);
  tick_cv_.notify_all();
}

}  // namespace mlcd::coordinator
