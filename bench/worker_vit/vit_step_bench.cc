// ViT train-step benchmark (bench/RESULTS.md, "ViT train step" and "Backbone kernels").
//
// Times one training step of the worker's backbone (forward, a cheap surrogate loss,
// backward, global-norm clipping, AdamW: exactly what worker/train/trainer.cc does per step minus
// the classification layer and collectives) in images/s on both kernel paths (the fused CPU
// kernels and ATen's operators, worker/model/vit.h), checks that the path the model chooses by
// default (ChosenVitKernels) is the faster one in this run (and likewise the backbone AdamW's
// kernel, ChosenAdamWKernel, timed alone on the model's parameters), then runs the same
// architecture written in python3-torch (bench/worker_vit/vit_step.py) with the same threads, batch and
// inputs' shapes, in the same run, and reports the chosen path's ratio to it.
//
//   build-*/bin/worker_vit_bench --preset vit-small --threads 2 --batch 128 --steps 5
//     --rounds 2 --out bench/results/worker_vit.json
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
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

using ::mlcd::bench::Median;

// The chosen kernels must run at least this fraction of the faster path's images/s: medians
// of the same code differ by up to this much between runs on a quiet 2-core machine.
constexpr double kChoiceTolerance = 0.95;

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

// The backbone optimizer's step alone (clipping + AdamW over the model's flat parameters, a
// fixed random gradient) with `kernel`, seconds per step.
std::vector<double> TimeAdamW(const mlcd::worker::VitOptions& options,
                              mlcd::worker::AdamWKernel kernel, int warmup, int steps) {
  mlcd::worker::VisionTransformer model(options);
  mlcd::worker::FlatParameters flat({model->DecayParameters(), model->NoDecayParameters()});
  flat.grads().normal_(0.0, 1e-3);
  mlcd::worker::BackboneAdamWOptions opt;
  opt.weight_decay = {0.2, 0.0};
  opt.kernel = kernel;
  mlcd::worker::BackboneAdamW adamw(&flat, opt);
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    adamw.Step(1e-3);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) times.push_back(t);
  }
  return times;
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
  bool both_kernels = true;
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
  app.add_option("--both-kernels", both_kernels,
                 "time both kernel paths (fused CPU kernels and ATen's operators), not only the "
                 "chosen one, and check the choice");
  app.add_option("--forward", forward,
                 "also time the forward alone: training forward (autograd on) vs forward only");
  app.add_option("--profile", profile,
                 "write a chrome trace of one C++ step (chosen kernels) to this file");
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
  using mlcd::worker::VitKernels;
  const VitKernels chosen = mlcd::worker::ChosenVitKernels(VitKernels::kAuto, torch::kCPU);
  std::vector<VitKernels> paths = {chosen};
  if (both_kernels) paths = {VitKernels::kFused, VitKernels::kAten};
  std::map<VitKernels, std::vector<double>> path_times;
  // The backbone optimizer's kernels this build has on the CPU, and the one it chooses.
  using mlcd::worker::AdamWKernel;
  const AdamWKernel chosen_adamw = mlcd::worker::ChosenAdamWKernel(AdamWKernel::kAuto, torch::kCPU);
  std::vector<AdamWKernel> adamw_kernels = {chosen_adamw};
  if (both_kernels) {
    adamw_kernels = {AdamWKernel::kLoops, AdamWKernel::kAtenOps};
    if (mlcd::worker::ChosenAdamWKernel(AdamWKernel::kFused, torch::kCPU) == AdamWKernel::kFused)
      adamw_kernels.push_back(AdamWKernel::kFused);
  }
  std::map<AdamWKernel, std::vector<double>> adamw_times;
  std::vector<double> py_times, train_fwd_times, only_fwd_times;
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
    for (VitKernels path : paths) {
      auto path_options = *options;
      path_options.kernels = path;
      Result r =
          RunCpp(path_options, batch, warmup, steps, round == 0 && path == chosen ? profile : "");
      parameters = r.parameters;
      path_times[path].insert(path_times[path].end(), r.step_seconds.begin(), r.step_seconds.end());
      std::cerr << "round " << round << " C++ " << mlcd::worker::VitKernelsName(path) << ": "
                << r.images_per_second << " images/s\n";
    }
    for (AdamWKernel kernel : adamw_kernels) {
      std::vector<double> t = TimeAdamW(*options, kernel, warmup, steps * 20);
      adamw_times[kernel].insert(adamw_times[kernel].end(), t.begin(), t.end());
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
  j["rounds"] = rounds;
  j["chosen_kernels"] = mlcd::worker::VitKernelsName(chosen);
  j["libtorch"] = TORCH_VERSION;
  for (const auto& [path, times] : path_times) {
    j[std::string("cpp_") + mlcd::worker::VitKernelsName(path)] = {
        {"images_per_second", batch / Median(times)},
        {"median_step_seconds", Median(times)},
        {"step_seconds", times},
        {"parameters", parameters}};
    std::cerr << "C++ " << mlcd::worker::VitKernelsName(path) << ": " << batch / Median(times)
              << " images/s (median step " << Median(times) << " s)\n";
  }
  const double chosen_ips = batch / Median(path_times[chosen]);
  int exit_code = 0;
  if (both_kernels) {
    // The rule holds when the chosen path is the faster one, or within the run's noise of it.
    const double fused_ips = batch / Median(path_times[VitKernels::kFused]);
    const double aten_ips = batch / Median(path_times[VitKernels::kAten]);
    const double best = std::max(fused_ips, aten_ips);
    const bool holds = chosen_ips >= kChoiceTolerance * best;
    j["chosen_over_aten"] = chosen_ips / aten_ips;
    j["chosen_over_fused"] = chosen_ips / fused_ips;
    j["choice_holds"] = holds;
    j["choice_tolerance"] = kChoiceTolerance;
    std::cerr << "chosen (" << mlcd::worker::VitKernelsName(chosen)
              << ") / ATen: " << chosen_ips / aten_ips << ", / fused: " << chosen_ips / fused_ips
              << (holds ? " (the choice holds)\n" : " (THE CHOICE DOES NOT HOLD)\n");
    if (!holds) exit_code = 2;
  }
  {
    nlohmann::json adamw;
    double best = 0;
    for (const auto& [kernel, times] : adamw_times) {
      adamw[mlcd::worker::AdamWKernelName(kernel)] = {{"median_step_seconds", Median(times)},
                                                      {"step_seconds", times}};
      best = best == 0 ? Median(times) : std::min(best, Median(times));
      std::cerr << "AdamW " << mlcd::worker::AdamWKernelName(kernel) << ": " << Median(times) * 1e3
                << " ms per step\n";
    }
    adamw["chosen"] = mlcd::worker::AdamWKernelName(chosen_adamw);
    if (both_kernels) {
      const bool holds = kChoiceTolerance * Median(adamw_times[chosen_adamw]) <= best;
      adamw["choice_holds"] = holds;
      std::cerr << "AdamW chosen (" << mlcd::worker::AdamWKernelName(chosen_adamw) << ")"
                << (holds ? ": the choice holds\n" : ": THE CHOICE DOES NOT HOLD\n");
      if (!holds) exit_code = 2;
    }
    j["backbone_adamw"] = adamw;
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
    return exit_code;
  }
  const double py_ips = batch / Median(py_times);
  std::cerr << "python3-torch:  " << py_ips << " images/s (median step " << Median(py_times)
            << " s)\n";
  j["python"] = {{"images_per_second", py_ips},
                 {"median_step_seconds", Median(py_times)},
                 {"step_seconds", py_times},
                 {"runs", py_runs}};
  j["python_command"] = cmd;
  j["speedup_vs_python"] = chosen_ips / py_ips;
  std::cout << j.dump(2) << std::endl;
  std::cerr << "speedup C++ chosen / python: " << chosen_ips / py_ips << "\n";
  auto dir = out.substr(0, out.rfind('/'));
  if (!dir.empty()) (void)mlcd::MakeDirs(dir);
  auto st = mlcd::WriteFileAtomically(out, j.dump(2) + "\n");
  if (!st.ok()) {
    std::cerr << st.ToString() << "\n";
    return 1;
  }
  return exit_code;
}
