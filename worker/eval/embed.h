// Embedding a dataset with a trained (or randomly initialised) backbone: what
// `mlcd-worker embed` (the coordinator's EXTRACTING phase) and `mlcd-worker eval` run.
//
//   MLCD_ASSIGN_OR_RETURN(EmbeddingModel m, LoadEmbeddingModel(checkpoint, &spec));
//   MLCD_ASSIGN_OR_RETURN(auto data, OpenImageDataset(m.spec.dataset(), "train"));
//   EmbedOptions o;  o.rank = 1;  o.world_size = 2;
//   MLCD_ASSIGN_OR_RETURN(EmbeddedPart part, EmbedDataset(m, *data, o));
//   // part.features: rows [part.begin, part.end) of the split, L2-normalised, with ids and
//   // class labels; WriteEmbeddingShard(dir, 1, 2, ...) stores them (worker/eval/features.h).
//
// Images go through the training preprocessing without augmentation (scaling, the dataset's
// normalisation, resize to model.image_size), the ViT runs in inference mode (no autograd),
// and every row is L2-normalised (the embedding as the classification layer sees it; other
// features as worker/model/vit.h describes them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/eval/features.h"
#include "worker/model/model_memory.h"
#include "worker/model/vit.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {

struct EmbeddingModel {
  VisionTransformer model{nullptr};
  // The spec the backbone was built from (the checkpoint's spec.json, or the given spec for a
  // random initialisation), defaults applied.
  v1::JobSpec spec;
  // The checkpoint directory the weights came from; empty for a random initialisation.
  std::string checkpoint;
  // "checkpoint /x/ckpt-r0-e1-s200 (vit-tiny: width 192, ...)" or "random init (seed 1, ...)".
  std::string description;
};

// What the loaded model is for, for the memory check made before it is built
// (worker/model/model_memory.h).
struct ModelLoadOptions {
  // kInference (embed, eval: parameters and one forward of `batch_size`) or kExport.
  ModelUse use = ModelUse::kInference;
  int64_t batch_size = 256;  // images per forward pass (EmbedOptions.batch_size)
  int ranks_on_host = 1;     // processes of the gang that share this host's memory
};

// With a `checkpoint` (a checkpoint directory, or a root holding LATEST): the architecture
// comes from the checkpoint's spec.json and the backbone weights from its files. Without:
// a backbone built from `spec` and initialised exactly as the trainer initialises round 0
// (ResetParameters(spec.training.seed)) -- the "random ViT" baseline and the features of the
// untrained model. `spec` may be null when a checkpoint is given. NOT_FOUND /
// FAILED_PRECONDITION / INVALID_ARGUMENT naming what is wrong. Before anything is built or
// read beyond spec.json, the model section must pass the spec limits (common/spec_validation.h:
// a checkpoint's spec.json is input like any other; INVALID_ARGUMENT) and its memory must fit
// this host (CheckModelMemory for `load`; RESOURCE_EXHAUSTED with the numbers).
StatusOr<EmbeddingModel> LoadEmbeddingModel(const std::string& checkpoint, const v1::JobSpec* spec,
                                            const ModelLoadOptions& load = {});

struct EmbedOptions {
  // This process's part of the split: rows [N·rank/W, N·(rank+1)/W).
  int rank = 0;
  int world_size = 1;
  // Images per forward pass.
  int64_t batch_size = 256;
  // What to extract (worker/model/vit.h): the projected embedding by default.
  VitFeatures features = VitFeatures::kEmbedding;
  int feature_blocks = 4;  // for kBlocks
  // Append the L2-normalised embedding after the (separately L2-normalised) features of each
  // row, for callers that need both from one pass (evaluation's Fig. 3 cosines); ignored for
  // kEmbedding.
  bool append_embedding = false;
  // Called after every batch with (rows done, rows of this part).
  std::function<void(int64_t, int64_t)> on_progress;
  // Polled between batches; returning true stops with CANCELLED.
  std::function<bool()> should_stop;
};

struct EmbeddedPart {
  LabelledFeatures features;  // ids = dataset row indices; labels = classes (empty if none)
  int64_t begin = 0;
  int64_t end = 0;
  int64_t total = 0;  // rows of the whole split
  double seconds = 0;
};

// Embeds rank's contiguous part of `dataset` with `model`. INVALID_ARGUMENT when the images do
// not fit the model (channels) or the options are out of range.
StatusOr<EmbeddedPart> EmbedDataset(const EmbeddingModel& model, const ImageDataset& dataset,
                                    const EmbedOptions& options);

// The same for model inputs given as a tensor: `images` [N, channels, image_size, image_size]
// float, already preprocessed (no scaling, normalisation or resize here), e.g. from an .npy
// file (`mlcd-worker embed --images`); ids are the row indices, no labels. Used to compare
// the model alone with other implementations (the torchvision export's test).
// INVALID_ARGUMENT when the shape does not fit the model.
StatusOr<EmbeddedPart> EmbedImageTensor(const EmbeddingModel& model, const torch::Tensor& images,
                                        const EmbedOptions& options);

}  // namespace mlcd::worker
