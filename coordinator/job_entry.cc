#include "coordinator/job_entry.h"

#include <algorithm>

#include "common/enums.h"

namespace mlcd::coordinator {

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

std::string KindName(v1::AssignmentKind kind) {
  switch (kind) {
    case v1::ASSIGNMENT_KIND_TRAIN:
      return "train";
    case v1::ASSIGNMENT_KIND_EXTRACT:
      return "extract (mlcd-worker embed)";
    case v1::ASSIGNMENT_KIND_EVALUATE:
      return "evaluate (mlcd-worker eval)";
    case v1::ASSIGNMENT_KIND_CLUSTER:
      return "cluster (mlcd-worker cluster-gang)";
    case v1::ASSIGNMENT_KIND_ASSIGN_LABELS:
      return "assign labels (mlcd-worker cluster-gang)";
    default:
      return "none";
  }
}

std::string WorkerStateName(v1::WorkerState state) {
  switch (state) {
    case v1::WORKER_STATE_IDLE:
      return "idle";
    case v1::WORKER_STATE_BUSY:
      return "busy";
    case v1::WORKER_STATE_DRAINING:
      return "draining";
    case v1::WORKER_STATE_LOST:
      return "lost";
    default:
      return "unknown";
  }
}

std::string RoundText(int r, int rounds) {
  return "round " + std::to_string(r + 1) + "/" + std::to_string(rounds);
}

std::string RestartsExhausted(int restarts, int max_restarts, const std::string& last_failure) {
  return "gang failed " + std::to_string(restarts) + " times (max_restarts " +
         std::to_string(max_restarts) + "); last failure: " + last_failure;
}

std::string JobDir(const std::string& data_dir, const std::string& job_id) {
  return data_dir + "/jobs/" + job_id;
}

std::string RoundLabelSet(const v1::Job& job, int r) {
  return "job/" + job.id() + (IsMcl(job.spec()) ? "/s" : "/r") + std::to_string(r);
}

bool IsMcl(const v1::JobSpec& spec) { return spec.has_mcl(); }

bool TrainsWithoutLabels(const v1::JobSpec& spec) {
  return spec.loss().variant() == ContrastiveVariantName(ContrastiveVariant::kInfoNce);
}

std::string StageText(int j, int stages) {
  return "stage " + std::to_string(j + 1) + "/" + std::to_string(stages);
}

bool GangClusters(const v1::JobSpec& spec) {
  return spec.clustering().engine() == ClusteringEngineName(ClusteringEngine::kGang);
}

v1::AssignmentKind KindFor(const JobEntry& job) {
  const v1::RoundStatus* round = job.round();
  switch (job.state()) {
    case v1::JOB_STATE_CLUSTERING:
      // The coordinator plans the round's features first (a phase thread), then the gang runs.
      return GangClusters(job.spec()) && round && !round->centroids_path().empty() &&
                     !round->clustered()
                 ? v1::ASSIGNMENT_KIND_CLUSTER
                 : v1::ASSIGNMENT_KIND_NONE;
    case v1::JOB_STATE_ASSIGNING:
      // After the gang wrote the labels, the coordinator seals the set (a phase thread).
      // The coordinator creates the set before it (a phase thread, which sets label_set and
      // gets its write delegation).
      // The gang starts once the coordinator holds the set's write delegation.
      return GangClusters(job.spec()) && round && !round->label_set().empty() &&
                     !round->labels_written() && job.label_writes &&
                     job.label_writes->label_set == round->label_set()
                 ? v1::ASSIGNMENT_KIND_ASSIGN_LABELS
                 : v1::ASSIGNMENT_KIND_NONE;
    case v1::JOB_STATE_TRAINING:
      return v1::ASSIGNMENT_KIND_TRAIN;
    case v1::JOB_STATE_EXTRACTING:
      return v1::ASSIGNMENT_KIND_EXTRACT;
    case v1::JOB_STATE_EVALUATING:
      return v1::ASSIGNMENT_KIND_EVALUATE;
    default:
      return v1::ASSIGNMENT_KIND_NONE;
  }
}

int RoundEndEpoch(const v1::RoundStatus& round, int end_epoch) {
  return round.round_epochs() > 0 ? std::min(end_epoch, round.round_epochs()) : end_epoch;
}

}  // namespace mlcd::coordinator
