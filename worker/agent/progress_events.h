// The children's progress events (docs/contracts.md) as the agent reads them: one JSON line
// of the child's progress file applied to the WorkerProgress it heartbeats and to the outcome
// its final report carries.
#pragma once

#include <string>
#include <vector>

#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::worker {

// One progress event of a child applied to the progress the agent reports. Returns false
// (and leaves `progress` alone) when the line is not a JSON object with an "event".
// `urgent` is set for events worth an immediate heartbeat; `error_message`, `outputs` and
// `evaluation` collect what the final report carries.
struct ChildOutcome {
  std::string error_message;
  std::vector<std::string> outputs;
  bool has_evaluation = false;
  v1::EvaluationResult evaluation;
  // cluster-gang: the CLUSTER result (rank 0) or the ASSIGN_LABELS statistics.
  bool has_cluster = false;
  v1::ClusterResult cluster;
  bool has_assign = false;
  v1::AssignResult assign;
  bool finished = false;
  // A "stopped" event: the child stopped early at a checkpoint.
  bool stopped = false;
  std::string stopped_reason;
};
bool ApplyProgressEvent(const std::string& line, v1::WorkerProgress* progress,
                        ChildOutcome* outcome, bool* urgent);

}  // namespace mlcd::worker
