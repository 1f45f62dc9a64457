// Training checkpoints: atomic directories that a gang of any world size can resume from.
//
// Layout of a checkpoint root (training.checkpoint_dir, shared by all ranks):
//   <root>/OWNER                        the job the root belongs to (common/checkpoint_owner.h)
//   <root>/LATEST                       name of the newest complete checkpoint (atomic write)
//   <root>/ckpt-r<R>-e<E>-s<S>/         one checkpoint: round R, epoch E, S steps done in E
//       meta.json                       position, sizes, seed, format (written last)
//       spec.json                       the job spec (protobuf JSON of mlcd.v1.JobSpec)
//       backbone.json                   parameter names, shapes, offsets; optimizer step
//       backbone.weights.npy            float32 [P]: all backbone parameters, flat
//       backbone.exp_avg.npy            float32 [P]: AdamW first moment
//       backbone.exp_avg_sq.npy         float32 [P]: AdamW second moment
//       rng_state.npy                   uint8: torch's default CPU generator (the training
//                                       RNG itself is counter-based: (seed, position))
//       class_centres.<b>-<e>.*         PartialFc shards by class range (worker/loss/partial_fc.h)
//       <objective files>               other objectives' state (worker/train/objective.h)
//   <root>/.tmp-ckpt-...                a checkpoint being written (never read)
//
// A root holds one job's checkpoints: rank 0 claims it for the job (OWNER, made once, linked
// into place) before it writes or prunes anything there, and a root another job claimed fails
// the write with FAILED_PRECONDITION, nothing in it touched.
//
// Writing is a collective of every rank: rank 0 claims the root and prepares <root>/.tmp-<name>; all ranks write
// their class-centre range into it (each file written atomically: temp, fsync, rename);
// barrier; rank 0 writes the backbone and meta.json, fsyncs the directory, renames it to
// <root>/<name>, fsyncs <root> and rewrites LATEST atomically; barrier. A crash at any point
// leaves either the previous checkpoint or the new one, never a partial one that a reader
// would take (readers only take directories named in LATEST or given explicitly, and check
// meta.json is present).
//
// Resuming (worker/train/trainer.cc): the backbone (and its optimizer state) is replicated, so
// every rank reads the same files; class centres are read by class range, so W ranks can resume a
// checkpoint written by W' ranks. A checkpoint of an earlier round resumes the backbone and
// its optimizer with fresh class centres for the new round.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/dist/collectives.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/checkpoint_retention.h"
#include "worker/train/objective.h"

namespace mlcd::worker {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  int format_version = kCheckpointFormatVersion;
  int round = 0;
  int epoch = 0;
  // Steps of `epoch` done; == steps_per_epoch when the epoch is complete.
  int64_t step_in_epoch = 0;
  int64_t steps_per_epoch = 0;
  bool epoch_complete = false;
  // Optimizer steps of the whole job so far.
  int64_t global_step = 0;
  int world_size = 1;
  int64_t num_classes = 0;
  int64_t embedding_dim = 0;
  std::string label_set;
  uint64_t seed = 0;
  int64_t num_samples = 0;
  int64_t global_batch_size = 0;
  // Wall-clock time of writing (seconds since the epoch).
  int64_t created_unix_ms = 0;

  // Where training continues from this checkpoint within its round.
  int next_epoch() const { return epoch_complete ? epoch + 1 : epoch; }
  int64_t next_step_in_epoch() const { return epoch_complete ? 0 : step_in_epoch; }
};

// "ckpt-r0-e3-s120".
std::string CheckpointName(const CheckpointMeta& meta);

struct CheckpointState {
  CheckpointMeta meta;
  const v1::JobSpec* spec = nullptr;
  VisionTransformer model{nullptr};
  FlatParameters* flat = nullptr;
  BackboneAdamW* optimizer = nullptr;
  // Writes its part of the checkpoint on every rank (TrainObjective::Save); may be null.
  const TrainObjective* objective = nullptr;
  // The job writing (the owner the root is claimed for); empty = a run by hand, which claims
  // nothing and may not write into a root a job claimed.
  std::string job_id;
};

// Writes a checkpoint under `root` (a collective over `comm`; every rank calls it with the
// same meta). Returns the complete checkpoint's directory. Then rank 0 prunes the root by
// `retention` (worker/train/checkpoint_retention.h: the newest keep_last stay, and neither
// the checkpoint the coordinator committed last nor any newer one is removed, nor the one
// the run resumed from; the default keeps everything).
StatusOr<std::string> WriteCheckpoint(const std::string& root, const CheckpointState& state,
                                      Collectives* comm, const CheckpointRetention& retention = {});

// `path` is a checkpoint directory (with meta.json) or a root with a LATEST file: returns the
// checkpoint directory. NOT_FOUND / FAILED_PRECONDITION with what is missing otherwise.
StatusOr<std::string> ResolveCheckpoint(const std::string& path);

StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& dir);
// The spec stored in the checkpoint.
StatusOr<v1::JobSpec> ReadCheckpointSpec(const std::string& dir);

// Loads the backbone weights into `model` by parameter name (INVALID_ARGUMENT naming the
// first parameter whose name or shape differs). Works on a model with or without
// FlatParameters (e.g. for evaluation).
Status LoadBackboneWeights(const std::string& dir, VisionTransformer& model);
// Loads the backbone optimizer's moments and step, mapped by parameter name onto `flat`
// (whose parameters must be `model`'s).
Status LoadBackboneOptimizer(const std::string& dir, VisionTransformer& model, FlatParameters* flat,
                             BackboneAdamW* optimizer);
// Restores torch's default CPU generator from rng_state.npy (absent file: unchanged).
Status LoadRngState(const std::string& dir);

}  // namespace mlcd::worker
