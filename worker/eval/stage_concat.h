// MCL's cross-stage integration (docs/mcl.md; the paper's Eq. 5): the representation of an
// MCL job is the concatenation, in stage order, of its stage encoders' embeddings. Each
// stage's part is its own L2-normalised embedding scaled by 1/sqrt(N), so the stages weigh
// the same and the concatenated row is unit-norm like every other embedding (cosine kNN and
// clustering read it as such). What `mlcd-worker embed --stage-checkpoint` and EVALUATING of
// an MCL job use.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/eval/embed.h"

namespace mlcd::worker {

// The stage encoders, loaded from their checkpoints (LoadEmbeddingModel each), in order.
// INVALID_ARGUMENT for none; a stage whose model's input (image size, channels) differs from
// stage 0's is FAILED_PRECONDITION naming both.
StatusOr<std::vector<EmbeddingModel>> LoadStageModels(const std::vector<std::string>& checkpoints,
                                                      const ModelLoadOptions& load = {});

// Embeds rank's part of `dataset` with every stage and concatenates the rows (widths summed;
// ids and labels of stage 0). `options.features` applies to every stage.
StatusOr<EmbeddedPart> EmbedStages(const std::vector<EmbeddingModel>& stages,
                                   const ImageDataset& dataset, const EmbedOptions& options);

// The concatenation alone: parts of the same rows, in order; each row of each part is
// L2-normalised and scaled by 1/sqrt(parts). INVALID_ARGUMENT when the row counts differ.
StatusOr<FeatureMatrix> ConcatenateStageFeatures(const std::vector<FeatureMatrix>& parts);

}  // namespace mlcd::worker
