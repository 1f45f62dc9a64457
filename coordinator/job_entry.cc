#include "coordinator/job_entry.h"

#include <algorithm>

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

v1::AssignmentKind KindFor(const JobEntry& job) {
  switch (job.state()) {
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
