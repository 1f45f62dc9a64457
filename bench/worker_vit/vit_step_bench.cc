// ViT train-step benchmark (bench/RESULTS.md, "ViT train step").
//
// Times one training step of the worker's backbone (forward, a cheap surrogate loss,
// backward, global-norm clipping, AdamW: exactly what worker/train/trainer.cc does per step minus
// the classification layer and collectives) in images/s, then runs the same architecture
// written in python3-torch (bench/worker_vit/vit_step.py) with the same threads, batch and
// inputs' shapes, in the same run, and reports the ratio. Target: >= 1.2x.
//
//   build-*/bin/worker_vit_bench --preset vit-small --threads 2 --batch 128 --steps 5
//     --rounds 2 --out bench/results/worker_vit.json
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "common/blas_env.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/malloc_env.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"

namespace {

using mlcd::worker::AttentionImpl;

using ::mlcd::bench::Median;

struct Result {
  std::vector<double> step_seconds;
  double median_seconds = 0;
  double images_per_second = 0;
  int64_t parameters = 0;
  double last_loss = 0;
};

Result RunCpp(const mlcd::worker::VitOptions& options, int batch, int warmup, int steps,
              const std::string& profile = "") {
  torch::manual_seed(0);
  mlcd::worker::VisionTransformer model(options);
  model->ResetParameters(0);
  mlcd::worker::FlatParameters flat({model->DecayParameters(), model->NoDecayParameters()});
  mlcd::worker::BackboneAdamWOptions opt;
  opt.weight_decay = {0.2, 0.0};
  opt.grad_clip_norm = 5.0;
  mlcd::worker::BackboneAdamW adamw(&flat, opt);
  torch::Tensor images =
      torch::rand({batch, options.channels, options.image_size, options.image_size});
  torch::Tensor target =
      torch::nn::functional::normalize(torch::randn({batch, options.embed_dim}),
                                       torch::nn::functional::NormalizeFuncOptions().dim(1));
  Result r;
  auto step = [&] {
    flat.ZeroGrad();
    torch::Tensor emb = model->forward(images);
    torch::Tensor loss = 1.0 - (torch::nn::functional::normalize(
                                    emb, torch::nn::functional::NormalizeFuncOptions().dim(1)) *
                                target)
                                   .sum(1)
                                   .mean();
    loss.backward();
    adamw.Step(1e-3);
    r.last_loss = loss.item<double>();
  };
  for (int i = 0; i < warmup; ++i) step();
  if (!profile.empty()) {
    torch::autograd::profiler::RecordProfile guard(profile);
    step();
  }
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.step_seconds = times;
  r.median_seconds = Median(times);
  r.images_per_second = batch / r.median_seconds;
  r.parameters = model->NumParameters();
  return r;
}

// The backbone's forward alone, images/s: as a training step runs it (autograd on: the graph,
// attention probabilities and GELU derivatives kept, then dropped) or forward only
// (torch::NoGradGuard: what embed / evaluation / extraction run; worker/model/fused_inference.h).
Result RunForward(const mlcd::worker::VitOptions& options, int batch, int warmup, int steps,
                  bool forward_only) {
  torch::manual_seed(0);
  mlcd::worker::VisionTransformer model(options);
  model->ResetParameters(0);
  torch::Tensor images =
      torch::rand({batch, options.channels, options.image_size, options.image_size});
  Result r;
  auto pass = [&] {
    if (forward_only) {
      torch::NoGradGuard no_grad;
      r.last_loss = model->forward(images).sum().item<double>();
    } else {
      r.last_loss = model->forward(images).sum().item<double>();
    }
  };
  for (int i = 0; i < warmup; ++i) pass();
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    pass();
    r.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.median_seconds = Median(r.step_seconds);
  r.images_per_second = batch / r.median_seconds;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  mlcd::SelectOpenblasCoretype(argc, argv);
  const bool malloc_tuned = mlcd::KeepFreedMemoryForReuse();  // common/malloc_env.h
  CLI::App app{"ViT train step: mlcd-worker's ViT vs the same architecture in python3-torch"};
  std::string preset = "vit-small";
  int threads = 2, batch = 128, steps = 5, warmup = 2, rounds = 2;
  std::string python = "/usr/bin/python3";
  std::string script = std::string(MLCD_SOURCE_DIR) + "/bench/worker_vit/vit_step.py";
  std::string out = std::string(MLCD_SOURCE_DIR) + "/bench/results/worker_vit.json";
  bool reference = true;
  bool forward = true;
  bool python_default_malloc = false;
  std::string profile;
  app.add_option("--preset", preset, "vit-tiny or vit-small (28x28x1 Fashion-MNIST shapes)");
  app.add_option("--threads", threads, "intra-op threads for both sides");
  app.add_option("--batch", batch, "images per step");
  app.add_option("--steps", steps, "timed steps (median reported)");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--rounds", rounds, "alternate C++ and Python this many times (medians over all)");
  app.add_option("--python", python,
                 "python with torch (python3-torch); empty = skip the Python side");
  app.add_option("--script", script, "the Python side");
  app.add_option("--out", out, "JSON result file");
  app.add_option("--reference-attention", reference,
                 "also time the C++ model with plain-ATen attention/GELU");
  app.add_option("--forward", forward,
                 "also time the forward alone: training forward (autograd on) vs forward only");
  app.add_option("--profile", profile,
                 "write a chrome trace of one C++ step (fused model) to this file");
  app.add_flag("--python-default-malloc", python_default_malloc,
               "run the Python side with glibc's default malloc settings instead of the ones this "
               "process uses "
               "(common/malloc_env.h), i.e. compare against stock python3-torch");
  CLI11_PARSE(app, argc, argv);

  mlcd::v1::ModelSpec spec;
  spec.set_preset(preset);
  mlcd::v1::JobSpec job;
  *job.mutable_model() = spec;
  mlcd::ApplyJobSpecDefaults(&job);
  auto options = mlcd::worker::VitOptionsFromSpec(job.model());
  if (!options.ok()) {
    std::cerr << options.status().ToString() << "\n";
    return 1;
  }
  at::set_num_threads(threads);
  std::cerr << "ViT " << preset << ": " << mlcd::worker::DescribeVitOptions(*options) << "; batch "
            << batch << ", threads " << threads << "\n";

  nlohmann::json j;
  j["benchmark"] = "worker_vit_train_step";
  j["preset"] = preset;
  j["model"] = mlcd::worker::DescribeVitOptions(*options);
  j["threads"] = threads;
  j["batch"] = batch;
  j["steps"] = steps;
  j["warmup"] = warmup;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  j["openblas_coretype"] = coretype ? coretype : "";

  // Rounds alternate the sides so that drifting load on a shared machine hits both alike;
  // medians are over all timed steps of all rounds.
  std::vector<double> fused_times, ref_times, py_times, train_fwd_times, only_fwd_times;
  int64_t parameters = 0;
  nlohmann::json py_runs = nlohmann::json::array();
  // Same allocator settings on both sides unless asked otherwise: glibc's environment
  // variables give the Python process what KeepFreedMemoryForReuse() gave this one.
  const bool python_same_malloc = malloc_tuned && !python_default_malloc;
  j["cpp_malloc"] =
      malloc_tuned ? "KeepFreedMemoryForReuse (mmap threshold 32 MiB, no trim)" : "glibc defaults";
  const std::string malloc_env =
      "MALLOC_MMAP_THRESHOLD_=" + std::to_string(mlcd::kMallocMmapThresholdBytes) +
      " MALLOC_TRIM_THRESHOLD_=" + std::to_string(mlcd::kMallocTrimThresholdBytes);
  j["python_malloc"] = python_same_malloc ? malloc_env : "glibc defaults";
  std::string cmd = (python_same_malloc ? malloc_env + " " : std::string()) + python + " " +
                    script + " --preset " + preset + " --threads " + std::to_string(threads) +
                    " --batch " + std::to_string(batch) + " --steps " + std::to_string(steps) +
                    " --warmup " + std::to_string(warmup);
  for (int round = 0; round < rounds; ++round) {
    Result fused = RunCpp(*options, batch, warmup, steps, round == 0 ? profile : "");
    parameters = fused.parameters;
    fused_times.insert(fused_times.end(), fused.step_seconds.begin(), fused.step_seconds.end());
    std::cerr << "round " << round << " C++ fused:     " << fused.images_per_second
              << " images/s\n";
    if (reference) {
      auto ref_options = *options;
      ref_options.attention = AttentionImpl::kReference;
      Result ref = RunCpp(ref_options, batch, warmup, steps);
      ref_times.insert(ref_times.end(), ref.step_seconds.begin(), ref.step_seconds.end());
      std::cerr << "round " << round << " C++ reference: " << ref.images_per_second
                << " images/s\n";
    }
    if (forward) {
      Result train_fwd = RunForward(*options, batch, warmup, steps, false);
      Result only_fwd = RunForward(*options, batch, warmup, steps, true);
      train_fwd_times.insert(train_fwd_times.end(), train_fwd.step_seconds.begin(),
                             train_fwd.step_seconds.end());
      only_fwd_times.insert(only_fwd_times.end(), only_fwd.step_seconds.begin(),
                            only_fwd.step_seconds.end());
      std::cerr << "round " << round << " training forward: " << train_fwd.images_per_second
                << " images/s, forward only: " << only_fwd.images_per_second << " images/s\n";
    }
    if (python.empty()) continue;
    std::string py_out;
    if (FILE* pipe = popen(cmd.c_str(), "r")) {
      char buf[4096];
      while (fgets(buf, sizeof(buf), pipe)) py_out += buf;
      int rc = pclose(pipe);
      if (rc != 0) {
        std::cerr << "python side failed (" << cmd << "):\n" << py_out << "\n";
        return 1;
      }
    }
    nlohmann::json py;
    try {
      py = nlohmann::json::parse(py_out.substr(py_out.rfind('{')));
    } catch (const std::exception& e) {
      std::cerr << "cannot parse the python side's output: " << py_out << "\n";
      return 1;
    }
    for (const auto& t : py["step_seconds"]) py_times.push_back(t.get<double>());
    std::cerr << "round " << round << " python3-torch: " << py["images_per_second"]
              << " images/s\n";
    py_runs.push_back(py);
  }
  const double fused_ips = batch / Median(fused_times);
  j["rounds"] = rounds;
  j["cpp_fused"] = {{"images_per_second", fused_ips},
                    {"median_step_seconds", Median(fused_times)},
                    {"step_seconds", fused_times},
                    {"parameters", parameters}};
  std::cerr << "C++ fused:      " << fused_ips << " images/s (median step " << Median(fused_times)
            << " s)\n";
  if (reference) {
    j["cpp_reference_attention"] = {{"images_per_second", batch / Median(ref_times)},
                                    {"median_step_seconds", Median(ref_times)},
                                    {"step_seconds", ref_times}};
    std::cerr << "C++ reference:  " << batch / Median(ref_times) << " images/s (median step "
              << Median(ref_times) << " s)\n";
  }
  if (forward) {
    const double train_ips = batch / Median(train_fwd_times);
    const double only_ips = batch / Median(only_fwd_times);
    j["forward_training"] = {{"images_per_second", train_ips},
                             {"median_seconds", Median(train_fwd_times)},
                             {"seconds", train_fwd_times}};
    j["forward_only"] = {{"images_per_second", only_ips},
                         {"median_seconds", Median(only_fwd_times)},
                         {"seconds", only_fwd_times}};
    j["forward_only_speedup"] = only_ips / train_ips;
    std::cerr << "forward: training " << train_ips << " images/s, forward only " << only_ips
              << " images/s (x" << only_ips / train_ips << ")\n";
  }
  if (python.empty()) {
    std::cout << j.dump(2) << std::endl;
    auto dir = out.substr(0, out.rfind('/'));
    if (!dir.empty()) (void)mlcd::MakeDirs(dir);
    auto st = mlcd::WriteFileAtomically(out, j.dump(2) + "\n");
    if (!st.ok()) {
      std::cerr << st.ToString() << "\n";
      return 1;
    }
    return 0;
  }
  const double py_ips = batch / Median(py_times);
  std::cerr << "python3-torch:  " << py_ips << " images/s (median step " << Median(py_times)
            << " s)\n";
  j["python"] = {{"images_per_second", py_ips},
                 {"median_step_seconds", Median(py_times)},
                 {"step_seconds", py_times},
                 {"runs", py_runs}};
  j["python_command"] = cmd;
  j["speedup_vs_python"] = fused_ips / py_ips;
  if (reference) j["reference_attention_speedup_vs_python"] = (batch / Median(ref_times)) / py_ips;
  j["target_speedup"] = 1.2;
  std::cout << j.dump(2) << std::endl;
  std::cerr << "speedup C++ fused / python: " << fused_ips / py_ips << " (target >= 1.2)\n";
  auto dir = out.substr(0, out.rfind('/'));
  if (!dir.empty()) (void)mlcd::MakeDirs(dir);
  auto st = mlcd::WriteFileAtomically(out, j.dump(2) + "\n");
  if (!st.ok()) {
    std::cerr << st.ToString() << "\n";
    return 1;
  }
  return 0;
}
