// mlcdctl export: a checkpoint's encoder for other tools (docs/export.md).
//
//   mlcdctl export --checkpoint DIR --format torchvision --out vit.pt
//       a state_dict that torchvision.models.VisionTransformer(...) loads with strict=True,
//       its constructor arguments in vit.json beside it (and printed);
//   mlcdctl export --checkpoint DIR --format safetensors --out out/model.safetensors
//       the same tensors as a safetensors file, out/model.config.json beside it;
//   mlcdctl export --checkpoint DIR --format hf-vit --out vit/     (or hf-vit-classifier,
//                                                                    hf-clip --out tower/)
//       a directory (config.json + model.safetensors) that transformers' ViTModel
//       (CLIPVisionModelWithProjection) .from_pretrained loads strictly.
// The work happens in `mlcd-worker export` (the binary next to mlcdctl, or --worker-binary /
// $MLCD_WORKER_BINARY), run here as a child process: mlcdctl has no tensor code.
#include <cstdio>
#include <memory>
#include <string>

#include "client/cli.h"
#include "client/worker_process.h"
#include "common/file_util.h"

namespace mlcd::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string format;
  std::string out;
  bool grey_as_rgb = false;
  std::string worker_binary;
  bool verbose = false;
};

int RunExport(Context& ctx, const ExportOptions& o) {
  if (o.format != "torchvision" && o.format != "safetensors" && o.format != "hf-vit" &&
      o.format != "hf-vit-classifier" && o.format != "hf-clip")
    return ctx.Fail(Status::InvalidArgument(
        "--format must be torchvision, safetensors, hf-vit, hf-vit-classifier or hf-clip, got \"" +
        o.format + "\""));
  if (!PathExists(o.checkpoint))
    return ctx.Fail(Status::NotFound(o.checkpoint + ": no such checkpoint"));
  WorkerRun run;
  run.binary = WorkerBinary(o.worker_binary);
  run.command = "export";
  run.args = {"--checkpoint", o.checkpoint, "--format", o.format, "--out", o.out};
  if (o.grey_as_rgb) run.args.push_back("--grey-as-rgb");
  if (!o.verbose) run.log_path = "/dev/null";  // its error comes back as the error event
  auto finished = RunWorkerCommand(run);
  if (!finished.ok()) return ctx.Fail(finished.status());
  const nlohmann::json& f = *finished;
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", f.dump(2).c_str());
    return kExitOk;
  }
  std::printf("exported %s\n", f.value("model", "").c_str());
  std::printf("  weights       %s (%s, %lld tensors, %lld parameters, %s names)\n",
              f.value("weights", "").c_str(), f.value("format", "").c_str(),
              static_cast<long long>(f.value("tensors", 0LL)),
              static_cast<long long>(f.value("parameters", 0LL)),
              f.value("tensor_names", "").c_str());
  std::printf("  config        %s\n", f.value("config", "").c_str());
  if (f.contains("torchvision_call"))
    std::printf("  torchvision   torchvision.models.%s\n", f.value("torchvision_call", "").c_str());
  if (f.contains("hf_class"))
    std::printf("  transformers  transformers.%s.from_pretrained(\"%s\")\n",
                f.value("hf_class", "").c_str(), o.out.c_str());
  return kExitOk;
}

CommandRegistration reg(65, [](CLI::App& app, Context& ctx) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand(
      "export",
      "Export a checkpoint's encoder (runs mlcd-worker export on this machine):\n"
      "  --format torchvision   a state_dict .pt that torchvision.models.VisionTransformer(...)\n"
      "                         loads with strict=True; the arguments are printed and written\n"
      "                         to <out>.json\n"
      "  --format safetensors   the same tensors as .safetensors, <name>.config.json beside it\n"
      "  --format hf-vit        a directory transformers.ViTModel.from_pretrained loads\n"
      "                         strictly; pooler_output is our embedding (transformers 4.48+)\n"
      "  --format hf-vit-classifier\n"
      "                         the same for ViTForImageClassification, which every\n"
      "                         transformers from 4.40 loads strictly; logits is our embedding\n"
      "  --format hf-clip       the same for CLIPVisionModelWithProjection (model.layout clip);\n"
      "                         image_embeds is our embedding");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, or a checkpoint root with LATEST")
      ->required();
  cmd->add_option("--format", o->format,
                  "torchvision | safetensors | hf-vit | hf-vit-classifier | hf-clip")
      ->required();
  cmd->add_option(
         "--out", o->out,
         "output file (.pt / .pth, or .safetensors), or directory (hf-vit, hf-vit-classifier, "
         "hf-clip)")
      ->required();
  cmd->add_flag("--grey-as-rgb", o->grey_as_rgb,
                "export a 1-channel (grey) model for torchvision's 3-channel input: each channel "
                "repeats the grey image");
  cmd->add_option(
      "--worker-binary", o->worker_binary,
      "mlcd-worker executable (default: $MLCD_WORKER_BINARY, else the one next to mlcdctl)");
  cmd->add_flag("--verbose,-v", o->verbose, "show the worker's log");
  cmd->callback([&ctx, o] { ctx.exit_code = RunExport(ctx, *o); });
});

}  // namespace
}  // namespace mlcd::cli
