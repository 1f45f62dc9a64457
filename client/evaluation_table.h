// The evaluation result beside its baselines (EvaluationResult.baselines), as `mlcdctl get`,
// `mlcdctl eval` and scripts/run_main_job.sh print it:
//
//   model          linear probe    kNN
//   trained             81.19 %    76.83 %
//   random init         76.65 %    70.02 %   (cached)
//   raw pixels          84.19 %    80.11 %   (cached)
#pragma once

#include <string>

#include "mlcd/v1/job.pb.h"

namespace mlcd::cli {

// The table, each line starting with `indent`, ending in a newline; empty without baselines.
std::string EvaluationTable(const v1::EvaluationResult& result, const std::string& indent);

}  // namespace mlcd::cli
