// MCL's evaluation (docs/mcl.md): every stage encoder alone, then the stages' concatenation
// (stage_concat.h), with the same probe and kNN on the same splits. The concatenation's
// result is the job's; the stages' are in its `stages`, in stage order.
//
// Stage j is evaluated as RunEvaluation evaluates a checkpoint, keeping its embedded splits
// under <output_dir>/stage<j>/{train,test}; rank 0 then concatenates them row by row into
// <output_dir>/concat/{train,test} and evaluates those as precomputed features. So each
// image is embedded once per stage.
#pragma once

#include "common/status.h"
#include "worker/eval/runner.h"

namespace mlcd::worker {

// `options.stage_checkpoints` (at least one) are the stages; `options.checkpoint` and the
// Fig. 3 cosines (a contrastive model has no class centres) are not used. An output_dir is
// required (the stages' embeddings go there). Errors name the stage.
StatusOr<EvaluationReport> RunStageEvaluation(const EvaluationOptions& options);

}  // namespace mlcd::worker
