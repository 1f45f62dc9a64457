// `mlcd-worker export`: a checkpoint's encoder as a torchvision state dict (.pt), a
// safetensors file, with its config beside it (worker/model/export.h), or a Hugging Face
// transformers directory (worker/model/hf_export.h). What `mlcdctl export` runs; also usable
// by hand (docs/export.md).
//
//   mlcd-worker export --checkpoint ckpt/ --format torchvision --out vit.pt
//   mlcd-worker export --checkpoint ckpt/ --format safetensors --out out/model.safetensors
//   mlcd-worker export --checkpoint ckpt/ --format hf-clip --out tower/
//
// Without --progress-jsonl it prints what it wrote and the torchvision constructor call. With
// it, one event per line:
//   {"event":"finished","weights":"vit.pt","config":"vit.json","tensor_names":"torchvision",
//    "torchvision_args":{...},"tensors":152,"parameters":87849472,"model":"..."}
//   (hf-vit / hf-clip: "tensor_names":"transformers","hf_class":"ViTModel", no torchvision_*)
//   {"event":"error","message":"FAILED_PRECONDITION: ..."}  (then exit status 1)
#include <iostream>
#include <memory>
#include <vector>

#include "common/file_util.h"
#include "common/log.h"
#include "worker/command.h"
#include "worker/command_io.h"
#include "worker/eval/embed.h"
#include "worker/model/export.h"
#include "worker/model/head_export.h"
#include "worker/train/checkpoint.h"

namespace mlcd::worker {
namespace {

struct ExportFlags {
  std::string checkpoint;
  // MCL: the stage encoders in stage order (--out is then a directory).
  std::vector<std::string> stage_checkpoints;
  std::string format;
  std::string out;
  bool grey_as_rgb = false;
  std::string progress_jsonl;
  std::string log_level = "info";
};

// MCL: every stage's encoder under <out>/stage<j>/ (model.pt, model.safetensors, or the
// transformers directory itself) and <out>/mcl-manifest.json saying how to concatenate them.
int RunStageExport(const ExportFlags& flags, ExportFormat format, cli::JsonLines& progress) {
  ModelLoadOptions load;
  load.use = ModelUse::kExport;
  nlohmann::json stages = nlohmann::json::array();
  int64_t width = 0;
  const size_t n = flags.stage_checkpoints.size();
  for (size_t j = 0; j < n; ++j) {
    auto model = LoadEmbeddingModel(flags.stage_checkpoints[j], nullptr, load);
    if (!model.ok()) return progress.Fail(model.status().WithContext("stage " + std::to_string(j)));
    const std::string dir = flags.out + "/stage" + std::to_string(j);
    const std::string out = IsHuggingFaceFormat(format)            ? dir
                            : format == ExportFormat::kTorchvision ? dir + "/model.pt"
                                                                   : dir + "/model.safetensors";
    ExportSettings settings;
    settings.format = format;
    settings.grey_as_rgb = flags.grey_as_rgb;
    auto result = ExportModel(*model->model, settings, out,
                              {{"checkpoint", model->checkpoint}, {"mcl_stage", j}});
    if (!result.ok())
      return progress.Fail(result.status().WithContext("stage " + std::to_string(j)));
    const int64_t dim = model->spec.model().embed_dim();
    width += dim;
    stages.push_back({{"stage", j},
                      {"checkpoint", model->checkpoint},
                      {"weights", result->weights_path},
                      {"config", result->config_path},
                      {"embed_dim", dim}});
  }
  const nlohmann::json manifest = {
      {"kind", "mcl-stage-encoders"},
      {"format", ExportFormatName(format)},
      {"stages", stages},
      {"width", width},
      {"concatenate",
       "embed the image with every stage's encoder, L2-normalise each embedding, multiply it by "
       "1/sqrt(" +
           std::to_string(n) + ") and concatenate them in stage order (width " +
           std::to_string(width) + ")"}};
  const std::string manifest_path = flags.out + "/mcl-manifest.json";
  Status st = WriteFileAtomically(manifest_path, manifest.dump(2) + "\n");
  if (!st.ok()) return progress.Fail(st);
  progress.Write({{"event", "finished"},
                  {"weights", manifest_path},
                  {"format", ExportFormatName(format)},
                  {"stages", n},
                  {"width", width}});
  if (!progress.to_stdout())
    std::cout << "wrote " << n << " stage encoders and " << manifest_path << "\n";
  return 0;
}

int RunExport(const ExportFlags& flags) {
  cli::JsonLines progress;
  auto fail = [&progress](const Status& st) { return progress.Fail(st); };
  if (!cli::ApplyLogLevelFlag(flags.log_level)) return 2;
  Status st = progress.Open(flags.progress_jsonl);
  if (!st.ok()) return fail(st);
  SetLogComponent("export");
  if (!flags.stage_checkpoints.empty()) {
    if (!flags.checkpoint.empty() || flags.out.empty())
      return fail(Status::InvalidArgument(
          "--stage-checkpoint exports an MCL job's stages: give every stage's checkpoint with it "
          "(no --checkpoint) and --out DIR"));
    auto format = ParseExportFormat(flags.format);
    if (!format.ok()) return fail(format.status().WithContext("--format"));
    return RunStageExport(flags, *format, progress);
  }
  if (flags.checkpoint.empty())
    return fail(Status::InvalidArgument(
        "no model: pass --checkpoint DIR (a checkpoint, or a checkpoint root with LATEST)"));
  if (flags.out.empty())
    return fail(Status::InvalidArgument(
        "no output: pass --out FILE (.pt or .safetensors) or DIR (hf-vit, hf-clip)"));
  auto format = ParseExportFormat(flags.format);
  if (!format.ok()) return fail(format.status().WithContext("--format"));

  ModelLoadOptions load;
  load.use = ModelUse::kExport;
  auto model = LoadEmbeddingModel(flags.checkpoint, nullptr, load);
  if (!model.ok()) return fail(model.status());
  auto meta = ReadCheckpointMeta(model->checkpoint);
  if (!meta.ok()) return fail(meta.status());
  nlohmann::json source = {{"checkpoint", model->checkpoint},
                           {"round", meta->round},
                           {"epoch", meta->epoch},
                           {"global_step", meta->global_step}};
  ExportSettings settings;
  settings.format = *format;
  settings.grey_as_rgb = flags.grey_as_rgb;
  auto result = ExportModel(*model->model, settings, flags.out, source);
  if (!result.ok()) return fail(result.status());
  MLCD_LOG(INFO) << "exported " << model->description << " to " << result->weights_path;
  // A bce or mulcon job's head goes beside the encoder (docs/export.md, "The label heads'
  // tensors").
  auto head = ExportCheckpointHead(model->checkpoint, flags.out, IsHuggingFaceFormat(*format));
  if (!head.ok()) return fail(head.status().WithContext("exporting the label head"));
  nlohmann::json event = {{"event", "finished"},
                          {"weights", result->weights_path},
                          {"config", result->config_path},
                          {"format", ExportFormatName(*format)},
                          {"tensor_names", !result->hf_class.empty()   ? "transformers"
                                           : result->torchvision_names ? "torchvision"
                                                                       : "mlcd"},
                          {"tensors", result->tensors},
                          {"parameters", result->parameters},
                          {"model", model->description}};
  if (!result->hf_class.empty()) event["hf_class"] = result->hf_class;
  if (!head->empty()) event["head"] = *head;
  if (result->torchvision_names) {
    event["torchvision_args"] = TorchvisionArgsJson(result->torchvision_args);
    event["torchvision_call"] = TorchvisionArgsCall(result->torchvision_args);
  }
  progress.Write(event);
  if (!progress.to_stdout()) {
    std::cout << "wrote " << result->weights_path << " (" << result->tensors << " tensors, "
              << result->parameters << " parameters) and " << result->config_path << "\n";
    if (result->torchvision_names)
      std::cout << "torchvision: torchvision.models."
                << TorchvisionArgsCall(result->torchvision_args) << "\n";
    if (!head->empty()) std::cout << "label head: " << *head << "\n";
    if (!result->hf_class.empty())
      std::cout << "transformers: " << result->hf_class << ".from_pretrained(\"" << flags.out
                << "\")\n";
  }
  return 0;
}

CommandRegistration export_registration(45, [](CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint's encoder for other tools: --format torchvision (a state_dict .pt "
      "that\ntorchvision.models.VisionTransformer loads with strict=True) or --format "
      "safetensors;\nthe config (constructor arguments, model options) goes beside it as JSON. "
      "--format hf-vit / hf-vit-classifier / hf-clip:\na directory transformers' ViTModel / "
      "ViTForImageClassification / CLIPVisionModelWithProjection loads strictly.");
  // Checked in RunExport: --checkpoint, or --stage-checkpoint for an MCL job's stages.
  cmd->add_option("--checkpoint", flags->checkpoint,
                  "checkpoint directory, or a checkpoint root with LATEST");
  cmd->add_option("--stage-checkpoint", flags->stage_checkpoints,
                  "MCL: a stage's checkpoint, once per stage in stage order; writes "
                  "<out>/stage<j>/ per stage and <out>/mcl-manifest.json (docs/mcl.md)");
  cmd->add_option("--format", flags->format,
                  "torchvision | safetensors | hf-vit | hf-vit-classifier | hf-clip")
      ->required();
  cmd->add_option("--out", flags->out,
                  "output file: .pt/.pth (torchvision) or .safetensors, its directory created; "
                  "hf-vit / hf-vit-classifier / hf-clip: the directory")
      ->required();
  cmd->add_flag("--grey-as-rgb", flags->grey_as_rgb,
                "a 1-channel model as torchvision's 3-channel one, for grey input repeated on "
                "the 3 channels (conv_proj holds a third of the patch weights per channel)");
  cli::AddProgressJsonlFlag(cmd, &flags->progress_jsonl);
  cli::AddLogLevelFlag(cmd, &flags->log_level);
  cmd->callback([flags, exit_code] { *exit_code = RunExport(*flags); });
});

}  // namespace
}  // namespace mlcd::worker
