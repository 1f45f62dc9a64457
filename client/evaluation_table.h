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

// Whether the result has single-label figures (a linear probe, which always picks λ > 0, or
// kNN): not for a dataset with annotations and no class labels.
bool HasSingleLabelResult(const v1::EvaluationResult& result);

// The table, each line starting with `indent`, ending in a newline; empty without baselines
// or without single-label figures.
std::string EvaluationTable(const v1::EvaluationResult& result, const std::string& indent);

// The multi-label metrics (EvaluationResult.multi_label, the model's own predictions, each
// baseline's) and the attribute probes (one row per attribute, one column per model), as the
// same commands print them; empty when the result has neither:
//
//   multi-label    mAP   Hamming  example-F1  macro-F1  micro-F1     P@1   (10 labels, ...)
//   trained      71.23 %  92.10 %   70.00 %   63.60 %   68.80 %  91.60 %
//   predictions  ...                                                       (the model's head)
//   random init  ...
//   attribute      trained  random init  raw pixels
//   shape          81.00 %      40.00 %     60.00 %
std::string AnnotationTables(const v1::EvaluationResult& result, const std::string& indent);

}  // namespace mlcd::cli
