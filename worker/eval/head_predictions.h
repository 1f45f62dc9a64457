// The model's own multi-label predictions (docs/evaluation.md, "The model's own predictions"):
// a checkpoint trained with a label head (the bce or mulcon objective keeps it as
// label_head.safetensors, worker/train/label_head_objective.h) scores the test split with
// that head, as the training step ran it:
//   bce     logits = head(the backbone's embedding)           (worker/loss/bce_head.h)
//   mulcon  logits = head(the last block's patch tokens).logits (worker/model/label_attention_head.h)
// Head label j is label j of the set the job trained on; the evaluation dataset's label ids
// must mean the same (for generated Fashion mosaics both are the Fashion-MNIST classes).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/eval/embed.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {

// The head's logits on every row of `test` (rows x labels, row-major), through the
// evaluation transform in batches of `batch_size`. Empty when `model.checkpoint` holds no
// label head, or when `test` has no label sets (nothing to score them against). A head whose
// label count differs from the test split's is INVALID_ARGUMENT naming both counts; a head
// file that does not match the backbone (its width or embedding size) too.
StatusOr<std::vector<double>> PredictTestLabels(const EmbeddingModel& model,
                                                const ImageDataset& test, int64_t batch_size);

}  // namespace mlcd::worker
