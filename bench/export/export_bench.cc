// Export benchmark (bench/RESULTS.md, "Export"): writes a checkpoint of each preset at
// random initialisation (not timed into the export), then times the real `mlcd-worker export`
// process (reading the checkpoint, renaming, writing the files) once per format, and
// reports seconds, tensors and bytes written. Target: seconds, not minutes, for vit-l14.
//
//   build/bin/export_bench --case vit-l14:hf-vit --case clip-l14:hf-clip --dir /tmp/exp
//     --out bench/results/export.json
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/stopwatch.h"
#include "common/subprocess.h"
#include "worker/dist/collectives.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/checkpoint.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using mlcd::SecondsSince;

// A random-init checkpoint of `preset` (3-channel, 224 or the preset's side) under `root`.
mlcd::StatusOr<std::string> MakeCheckpoint(const std::string& preset, const std::string& root,
                                           int64_t* parameters) {
  mlcd::v1::JobSpec spec;
  spec.mutable_dataset()->set_format("image-folder");
  spec.mutable_model()->set_preset(preset);
  mlcd::ApplyJobSpecDefaults(&spec);
  MLCD_ASSIGN_OR_RETURN(auto options, mlcd::worker::VitOptionsFromSpec(spec.model()));
  mlcd::worker::VisionTransformer model(options);
  *parameters = model->NumParameters();
  mlcd::worker::FlatParameters flat({model->DecayParameters(), model->NoDecayParameters()});
  mlcd::worker::BackboneAdamW optimizer(&flat, mlcd::worker::BackboneAdamWOptions{});
  mlcd::worker::CheckpointState state;
  state.meta.steps_per_epoch = 1;
  state.meta.step_in_epoch = 1;
  state.meta.epoch_complete = true;
  state.meta.embedding_dim = spec.model().embed_dim();
  state.spec = &spec;
  state.model = model;
  state.flat = &flat;
  state.optimizer = &optimizer;
  auto comm = mlcd::worker::Collectives::Local();
  return mlcd::worker::WriteCheckpoint(root, state, comm.get());
}

int64_t BytesUnder(const std::string& path) {
  if (!fs::is_directory(path)) return fs::exists(path) ? static_cast<int64_t>(fs::file_size(path)) : 0;
  int64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(path))
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  return total;
}

std::string OutPath(const std::string& dir, const std::string& format) {
  if (format == "torchvision") return dir + "/vit.pt";
  if (format == "safetensors") return dir + "/st/model.safetensors";
  return dir + "/" + format;  // hf-vit, hf-clip: a directory
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times mlcd-worker export on random-init checkpoints"};
  std::vector<std::string> cases = {"vit-l14:hf-vit", "clip-l14:hf-clip"};
  std::string dir = "/tmp/mlcd-export-bench", out, worker;
  app.add_option("--case", cases, "PRESET:FORMAT (repeatable)");
  app.add_option("--dir", dir, "scratch directory (checkpoints and exports; removed at the end)");
  app.add_option("--worker-binary", worker, "mlcd-worker (default: the one next to this binary)");
  app.add_option("--out", out, "JSON results file");
  CLI11_PARSE(app, argc, argv);
  if (worker.empty())
    worker = (fs::read_symlink("/proc/self/exe").parent_path() / "mlcd-worker").string();
  torch::set_num_threads(2);

  std::map<std::string, std::string> checkpoints;
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& c : cases) {
    const size_t colon = c.find(':');
    if (colon == std::string::npos) {
      std::cerr << "--case " << c << ": expected PRESET:FORMAT\n";
      return 2;
    }
    const std::string preset = c.substr(0, colon), format = c.substr(colon + 1);
    nlohmann::json r = {{"preset", preset}, {"format", format}};
    if (!checkpoints.count(preset)) {
      int64_t parameters = 0;
      const auto start = Clock::now();
      auto ckpt = MakeCheckpoint(preset, dir + "/" + preset, &parameters);
      if (!ckpt.ok()) {
        std::cerr << preset << ": " << ckpt.status().ToString() << "\n";
        return 1;
      }
      checkpoints[preset] = *ckpt;
      std::cout << preset << ": random-init checkpoint (" << parameters << " parameters) in "
                << SecondsSince(start) << " s\n";
    }
    const std::string target = OutPath(dir + "/out-" + preset, format);
    mlcd::SpawnOptions spawn;
    spawn.argv = {worker, "export", "--checkpoint", checkpoints[preset], "--format", format,
                  "--out", target};
    spawn.log_path = dir + "/export.log";
    const auto start = Clock::now();
    auto pid = mlcd::Spawn(spawn);
    const int rc = pid.ok() ? mlcd::WaitForExit(*pid) : -1;
    const double seconds = SecondsSince(start);
    r["seconds"] = seconds;
    r["exit_code"] = rc;
    r["bytes_written"] = BytesUnder(format == "torchvision" || format == "safetensors"
                                        ? fs::path(target).parent_path().string()
                                        : target);
    std::cout << preset << " -> " << format << ": " << seconds << " s, "
              << r["bytes_written"].get<int64_t>() / 1e6 << " MB, exit " << rc << "\n";
    results.push_back(r);
    if (rc != 0) {
      std::cerr << "export failed; see " << spawn.log_path << "\n";
      return 1;
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!out.empty()) {
    nlohmann::json doc = {{"benchmark", "export"}, {"threads", 2}, {"results", results}};
    if (!mlcd::WriteFileAtomically(out, doc.dump(2) + "\n").ok()) return 1;
  }
  return 0;
}
