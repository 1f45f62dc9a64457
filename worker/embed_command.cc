// `mlcd-worker embed`: writes L2-normalised embeddings of a dataset split as .npy shards
// (worker/eval/features.h layout), one shard per rank of the gang. What the coordinator's
// EXTRACTING phase runs (via the worker agent) to get the features of the next clustering
// round; also usable by hand (docs/evaluation.md).
//
//   mlcd-worker embed --checkpoint ckpt/ --out feats/                  # all of the train split
//   mlcd-worker embed --spec job.yaml --out feats/                     # random init (round 0)
//   mlcd-worker embed --assignment a.json --progress-jsonl p.jsonl     # EXTRACT assignment
//
// Progress events (one JSON object per line):
//   {"event":"started","rank":0,"world_size":2,"rows_total":30000,"split":"train","model":"..."}
//   {"event":"progress","phase":"embed train","rows_done":4096,"rows_total":30000}
//   {"event":"finished","outputs":["feats/embeddings-00000-of-00002.npy"],"rows":30000,"seconds":12.5}
//   {"event":"error","message":"..."}  (then exit status 1)
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/blas_env.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/npy.h"
#include "worker/agent/assignment_paths.h"
#include "worker/command.h"
#include "worker/command_io.h"
#include "worker/eval/embed.h"
#include "worker/eval/stage_concat.h"
#include "worker/train/dataset.h"
#include "worker/train/trainer.h"

namespace mlcd::worker {
namespace {

struct EmbedFlags {
  std::string assignment;
  WorkerRootFlags data_roots;
  std::string spec;
  std::string checkpoint;
  // MCL: the stage encoders, in stage order; the embedding is their concatenation.
  std::vector<std::string> stage_checkpoints;
  std::string split = "train";
  int64_t limit = -1;
  std::string out;
  std::string images;
  int rank = 0;
  int world_size = 1;
  int64_t batch_size = 256;
  int threads = 0;
  std::string progress_jsonl;
  std::string log_level = "info";
};

// The rank's last progress event: its shard and the rows it embedded; the exit code 0.
int Finished(cli::JsonLines& progress, const EmbeddingShardFiles& files, const EmbeddedPart& part) {
  progress.Write({{"event", "finished"},
                  {"outputs", {files.features}},
                  {"rows", part.features.features.rows},
                  {"begin", part.begin},
                  {"end", part.end},
                  {"seconds", part.seconds}});
  return 0;
}

// `--images FILE.npy`: float32 [N, C, S, S] model inputs, already preprocessed; rank's
// contiguous part of the rows goes to the shard (ids = row indices, no labels).
int EmbedImagesFile(const EmbedFlags& flags, const EmbeddingModel& model, int rank, int world_size,
                    const std::string& out, cli::JsonLines& progress) {
  std::vector<int64_t> shape;
  auto values = ReadNpyAsFloat32(flags.images, &shape);
  if (!values.ok()) return progress.Fail(values.status().WithContext("--images"));
  torch::Tensor images = torch::from_blob(values->data(), shape, torch::kFloat);
  EmbedOptions eo;
  eo.rank = rank;
  eo.world_size = world_size;
  eo.batch_size = flags.batch_size;
  auto part = EmbedImageTensor(model, images, eo);
  if (!part.ok()) return progress.Fail(part.status().WithContext("--images " + flags.images));
  Status st = WriteEmbeddingShard(out, rank, world_size, part->features.features,
                                  part->features.ids, nullptr);
  if (!st.ok()) return progress.Fail(st);
  EmbeddingShardFiles files = EmbeddingShardNames(out, rank, world_size);
  MLCD_LOG(INFO) << "wrote " << part->features.features.rows << " embeddings of " << flags.images
                 << " to " << files.features;
  return Finished(progress, files, *part);
}

// The inputs RunEmbed needs once the assignment and the spec file are read.
Status CheckEmbedInputs(const EmbedFlags& flags, const std::string& checkpoint, bool have_spec,
                        const std::string& out) {
  if (out.empty()) return Status::InvalidArgument("no output directory: pass --out DIR");
  if (!flags.stage_checkpoints.empty() && (!checkpoint.empty() || !flags.images.empty()))
    return Status::InvalidArgument(
        "--stage-checkpoint embeds a dataset split with the stages' concatenation: pass it "
        "without --checkpoint and --images");
  if (checkpoint.empty() && flags.stage_checkpoints.empty() && !have_spec)
    return Status::InvalidArgument(
        "no model: pass --checkpoint DIR (a trained model) or --spec FILE "
        "(a random initialisation of its model)");
  if (flags.split != "train" && flags.split != "test")
    return Status::InvalidArgument("--split must be train or test, got \"" + flags.split + "\"");
  return Status::Ok();
}

int RunEmbed(const EmbedFlags& flags, const CLI::App& cmd) {
  cli::JsonLines progress;
  auto fail = [&progress](const Status& st) { return progress.Fail(st); };
  if (!cli::ApplyLogLevelFlag(flags.log_level)) return 2;
  Status st = progress.Open(flags.progress_jsonl);
  if (!st.ok()) return fail(st);

  v1::JobSpec spec;
  bool have_spec = false;
  std::string checkpoint = flags.checkpoint, out = flags.out;
  int rank = flags.rank, world_size = flags.world_size, ranks_on_host = 1;
  if (!flags.assignment.empty()) {
    auto a = cli::ReadAssignment(flags.assignment);
    if (!a.ok()) return fail(a.status().WithContext("--assignment"));
    st = ConfineAssignmentForChild(*a, flags.data_roots);
    if (!st.ok()) return fail(st);
    if (a->has_spec()) {
      spec = a->spec();
      have_spec = true;
    }
    if (checkpoint.empty()) checkpoint = a->resume_checkpoint();
    if (out.empty()) out = a->output_dir();
    if (cmd.get_option("--rank")->count() == 0) rank = a->rank();
    if (cmd.get_option("--world-size")->count() == 0)
      world_size = a->world_size() > 0 ? a->world_size() : 1;
    ranks_on_host = std::max(1, a->ranks_on_host());
  }
  if (!flags.spec.empty()) {
    auto s = LoadJobSpecFile(flags.spec);
    if (!s.ok()) return fail(s.status().WithContext("--spec"));
    spec = *s;
    have_spec = true;
  }
  st = CheckEmbedInputs(flags, checkpoint, have_spec, out);
  if (!st.ok()) return fail(st);
  SetLogComponent("embed r" + std::to_string(rank));

  ModelLoadOptions load;
  load.batch_size = flags.batch_size;
  // The gang's ranks on this host share its memory (they form no process group to count
  // themselves; the coordinator counts them from the workers' registered hosts).
  load.ranks_on_host = ranks_on_host;
  std::vector<EmbeddingModel> stages;
  if (!flags.stage_checkpoints.empty()) {
    auto loaded = LoadStageModels(flags.stage_checkpoints, load);
    if (!loaded.ok()) return fail(loaded.status());
    stages = std::move(*loaded);
  }
  // With stages, stage 0 stands for the model where one is described (its input, spec).
  auto model = stages.empty() ? LoadEmbeddingModel(checkpoint, have_spec ? &spec : nullptr, load)
                              : StatusOr<EmbeddingModel>(stages[0]);
  if (!model.ok()) return fail(model.status());
  if (!have_spec) spec = model->spec;
  ApplyJobSpecDefaults(&spec);
  int threads = flags.threads > 0 ? flags.threads : spec.training().threads_per_worker();
  if (threads > 0) {
    at::set_num_threads(threads);
    SetBlasThreads(threads);  // OpenBLAS keeps its own pool (common/blas_env.h)
  }

  if (!flags.images.empty()) return EmbedImagesFile(flags, *model, rank, world_size, out, progress);
  v1::DatasetSpec ds = spec.dataset();
  int64_t test_limit = 0;
  if (flags.limit >= 0) {
    if (flags.split == "train") ds.set_limit(static_cast<uint64_t>(flags.limit));
    test_limit = flags.limit;
  }
  auto data = OpenImageDataset(ds, flags.split, test_limit, &model->spec.model());
  if (!data.ok()) return fail(data.status());

  EmbedOptions eo;
  eo.rank = rank;
  eo.world_size = world_size;
  eo.batch_size = flags.batch_size;
  int64_t b, e;
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return fail(Status::InvalidArgument("--rank " + std::to_string(rank) +
                                        " is outside --world-size " + std::to_string(world_size)));
  ContiguousPart((*data)->size(), rank, world_size, &b, &e);
  MLCD_LOG(INFO) << "embedding rows [" << b << ", " << e << ") of " << (*data)->Describe()
                 << " with " << model->description << " into " << out;
  progress.Write({{"event", "started"},
                  {"rank", rank},
                  {"world_size", world_size},
                  {"split", flags.split},
                  {"rows_total", e - b},
                  {"model", stages.empty() ? model->description
                                           : std::to_string(stages.size()) + " MCL stages"}});
  auto last = std::chrono::steady_clock::now();
  const std::string phase = "embed " + flags.split;
  eo.on_progress = [&](int64_t done, int64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (done == total || now - last >= std::chrono::seconds(1)) {
      last = now;
      progress.Write(
          {{"event", "progress"}, {"phase", phase}, {"rows_done", done}, {"rows_total", total}});
    }
  };
  auto part = stages.empty() ? EmbedDataset(*model, **data, eo) : EmbedStages(stages, **data, eo);
  if (!part.ok()) return fail(part.status());
  const std::vector<int64_t>* labels =
      part->features.labels.empty() ? nullptr : &part->features.labels;
  st = WriteEmbeddingShard(out, rank, world_size, part->features.features, part->features.ids,
                           labels);
  if (!st.ok()) return fail(st);
  EmbeddingShardFiles files = EmbeddingShardNames(out, rank, world_size);
  MLCD_LOG(INFO) << "wrote " << part->features.features.rows << " x "
                 << part->features.features.cols << " embeddings to " << files.features << " ("
                 << part->seconds << " s, "
                 << (part->seconds > 0 ? part->features.features.rows / part->seconds : 0)
                 << " images/s)";
  return Finished(progress, files, *part);
}

CommandRegistration embed_registration(30, [](CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<EmbedFlags>();
  CLI::App* cmd = app.add_subcommand("embed",
                                     "Write L2-normalised embeddings of a dataset split as .npy "
                                     "shards (+ .ids.npy, .labels.npy):\n"
                                     "rank R of W embeds rows [N*R/W, N*(R+1)/W) into "
                                     "DIR/embeddings-RRRRR-of-WWWWW.npy (five digits:\n"
                                     "embeddings-00000-of-00001.npy for W = 1). Sample ids are "
                                     "the split's row indices, so the output feeds mlcd-clusterd "
                                     "directly (the next clustering round).");
  cmd->add_option(
      "--assignment", flags->assignment,
      "protobuf JSON of an mlcd.v1.Assignment (EXTRACT): spec, rank, world size, resume_checkpoint "
      "(the model; empty = random init) and output_dir; explicit flags override it");
  AddWorkerDataRootFlag(*cmd, &flags->data_roots,
                        "none: paths are not confined (the agent passes its own roots)");
  cmd->add_option("--spec", flags->spec,
                  "job spec (YAML, or .json protobuf JSON): the dataset, and the model for a "
                  "random initialisation");
  cmd->add_option(
      "--checkpoint", flags->checkpoint,
      "checkpoint directory, or a checkpoint root with LATEST (default: random init from --spec)");
  cmd->add_option("--stage-checkpoint", flags->stage_checkpoints,
                  "MCL: a stage's checkpoint, once per stage in stage order; rows are the "
                  "concatenation of the stages' embeddings, each L2-normalised and scaled by "
                  "1/sqrt(stages) (docs/mcl.md)");
  cmd->add_option("--images", flags->images,
                  "embed these model inputs instead of a dataset split: an .npy of float32 [N, "
                  "C, S, S], already preprocessed (compares the model alone with other code)");
  cmd->add_option("--split", flags->split, "train | test")->capture_default_str();
  cmd->add_option("--limit", flags->limit,
                  "only the first N images of the split (default: the spec's dataset.limit for "
                  "train, all for test)");
  cmd->add_option("--out", flags->out, "output directory (created if missing)");
  cmd->add_option("--rank", flags->rank, "this process's rank")
      ->envname("MLCD_RANK")
      ->capture_default_str();
  cmd->add_option("--world-size", flags->world_size, "processes sharing the split")
      ->envname("MLCD_WORLD_SIZE")
      ->capture_default_str();
  cmd->add_option("--batch-size", flags->batch_size, "images per forward pass")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads,
                  "intra-op threads (default: training.threads_per_worker, else all)");
  cli::AddProgressJsonlFlag(cmd, &flags->progress_jsonl);
  cli::AddLogLevelFlag(cmd, &flags->log_level);
  cli::AddChildMaxDecodeMemoryFlag(cmd);
  cmd->callback([flags, cmd, exit_code] { *exit_code = RunEmbed(*flags, *cmd); });
});

}  // namespace
}  // namespace mlcd::worker
