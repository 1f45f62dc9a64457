// The coordinator's side of clustering.engine "gang" after a CLUSTER or ASSIGN_LABELS gang
// ended with every member successful (job_manager.h, FinishClusteringGang).
#include "coordinator/job_manager.h"
#include "coordinator/phase_runner.h"

namespace mlcd::coordinator {
namespace {

const v1::GangMember* RankZero(const v1::GangAttempt& attempt) {
  for (const auto& m : attempt.members()) {
    if (m.rank() == 0) return &m;
  }
  return nullptr;
}

}  // namespace

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
  auto entry = jobs_.NewHistory(
      job, "labels_written",
      round_text + ": " + std::to_string(rank0->assign().num_samples()) + " samples written into " +
          RoundLabelSet(job->job().id(), attempt.round()) + " by " +
          std::to_string(attempt.world_size()) + " workers; sealing it");
  entry.set_attempt_id(attempt.id());
  jobs_.Persist(job, {entry});
  jobs_.Touch(job);
  tick_cv_.notify_all();
}

}  // namespace mlcd::coordinator
