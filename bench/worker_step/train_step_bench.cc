// Training-step benchmark of one rank on its device (bench/RESULTS.md, "GPU step").
//
// Runs TrainStep (worker/train/train_step.h) -- the step `mlcd-worker train` runs -- on random
// images and labels: a ViT preset on --device under --precision, the PartialFC MLCD layer on
// the host over Gloo, the backbone's gradient sync over NCCL (CUDA, world size > 1) or Gloo.
// Prints and writes (--out) images/s of the rank, the median split of a step, and the peak
// memory of the process (and, on CUDA, of the device).
//
//   worker_step_bench --preset vit-b16 --batch 64 --device cuda --precision bf16 --steps 5
//   worker_step_bench ... --world-size 2 --rank R --rendezvous 127.0.0.1:29512   (per rank)
//   worker_step_bench --spec examples/fashion-mnist.yaml --tensorboard-dir /tmp/tb --steps 60
//       the spec's model, per-rank batch, k, l and r; timed steps alternate between writing
//       rank 0's TensorBoard curves (worker/train/training_curves.h, every
//       training.tensorboard_every_steps) and not, and the medians of the two are compared
//       (bench/RESULTS.md, "TensorBoard event files").
#include <torch/torch.h>

#ifdef MLCD_WITH_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/process_memory.h"
#include "bench/stats.h"
#include "common/blas_env.h"
#include "common/job_spec.h"
#include "worker/dist/collectives.h"
#include "worker/loss/partial_fc.h"
#include "worker/model/vit.h"
#include "worker/torch_compat.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/grad_sync.h"
#include "worker/train/partial_fc_objective.h"
#include "worker/train/train_step.h"
#include "worker/train/trainer.h"
#include "worker/train/training_curves.h"

namespace mlcd::worker {
namespace {

// The most bytes the caching allocator had handed out on `device` at once during the run (the
// step's peak: parameters, optimizer state, the activations kept for the backward, the
// layer's shard); -1 off CUDA.
int64_t DevicePeakBytes(const torch::Device& device) {
#ifdef MLCD_WITH_NCCL
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .peak;
  }
#endif
  (void)device;
  return -1;
}

struct BenchFlags {
  std::string preset = "vit-b16";
  int batch = 64;  // per rank
  int steps = 5;
  int warmup = 2;
  std::string device = "auto";
  std::string precision = "bf16";
  int world_size = 1;
  int rank = 0;
  std::string rendezvous = "127.0.0.1:29512";
  int64_t classes = 100000;
  double sample_ratio = 0.1;
  int labels_per_sample = 8;
  int threads = 0;
  int layer_threads = 1;        // PartialFcOptions::compute_threads
  std::string layer = "auto";   // host | device | auto (device on CUDA, host on the CPU)
  std::string spec;             // job spec: model, batch per rank, k, l, r from it
  std::string tensorboard_dir;  // alternate timed steps write TensorBoard curves here
  std::string out;
};

// The progress event the trainer emits after a step (worker/train/trainer.cc), which the
// TensorBoard curves take.
nlohmann::json ProgressEvent(int64_t global_step, double loss, double step_seconds, int batch) {
  return {{"event", "progress"},
          {"round", 0},
          {"epoch", 0},
          {"step_in_epoch", global_step},
          {"steps_per_epoch", 1000},
          {"global_step", global_step},
          {"loss", loss},
          {"samples_per_second", batch / std::max(1e-9, step_seconds)},
          {"mean_positive_cosine", 0.5},
          {"mean_negative_cosine", 0.0},
          {"learning_rate", 1e-4},
          {"label_wait_seconds", 0.0},
          {"step_seconds", step_seconds}};
}

using ::mlcd::bench::Median;

int Fail(const Status& s) {
  std::fprintf(stderr, "worker_step_bench: %s\n", s.ToString().c_str());
  return 1;
}

int Run(const BenchFlags& f) {
  if (f.threads > 0) {
    at::set_num_threads(f.threads);
    SetBlasThreads(f.threads);  // as the trainer does (common/blas_env.h)
  }
  auto device = ResolveDevice(f.device, f.rank);
  if (!device.ok()) return Fail(device.status());
  auto precision = ParsePrecision(f.precision);
  if (!precision.ok()) return Fail(precision.status());
  v1::JobSpec spec;
  spec.mutable_model()->set_preset(f.preset);
  ApplyJobSpecDefaults(&spec);
  int batch = f.batch;
  int64_t classes = f.classes;
  int labels_per_sample = f.labels_per_sample;
  double sample_ratio = f.sample_ratio;
  if (!f.spec.empty()) {
    auto loaded = LoadJobSpecFile(f.spec);
    if (!loaded.ok()) return Fail(loaded.status().WithContext("--spec"));
    spec = *loaded;
    batch = spec.training().batch_size() / std::max(1, spec.training().world_size());
    classes = spec.clustering().k();
    labels_per_sample = spec.clustering().l();
    sample_ratio = spec.loss().sample_ratio();
  }
  std::unique_ptr<TrainingCurves> curves;
  if (!f.tensorboard_dir.empty()) {
    TrainingCurvesOptions c;
    c.tensorboard_dir = f.tensorboard_dir;
    c.every_steps = spec.training().tensorboard_every_steps();
    auto made = TrainingCurves::Create(c);
    if (!made.ok()) return Fail(made.status());
    curves = std::move(*made);
  }
  auto vit = VitOptionsFromSpec(spec.model());
  if (!vit.ok()) return Fail(vit.status());

  PartialFcLayer which = device->is_cuda() ? PartialFcLayer::kDevice : PartialFcLayer::kHost;
  if (f.layer != "auto") {
    auto parsed = ParsePartialFcLayer(f.layer);
    if (!parsed.ok()) return Fail(parsed.status());
    which = *parsed;
  }
  // The layer's group moves its tensors: the device's (one group for everything) for the
  // device layer, the CPU's for the host layer; the backbone's gradients go over the device's.
  CollectivesOptions copts;
  copts.rank = f.rank;
  copts.world_size = f.world_size;
  copts.rendezvous = f.rendezvous;
  copts.timeout = std::chrono::seconds(300);
  copts.store_prefix = "bench";
  copts.device = which == PartialFcLayer::kDevice ? *device : torch::Device(torch::kCPU);
  auto comm = Collectives::Create(copts);
  if (!comm.ok()) return Fail(comm.status());
  std::unique_ptr<Collectives> backbone_comm;
  if (copts.device != *device && f.world_size > 1) {
    CollectivesOptions bopts = copts;
    bopts.device = *device;
    bopts.store_prefix = "bench/backbone";
    auto made = Collectives::Create(bopts);
    if (!made.ok()) return Fail(made.status());
    backbone_comm = std::move(*made);
  }
  Collectives* sync_comm = backbone_comm ? backbone_comm.get() : comm->get();

  VisionTransformer model(*vit);
  model->ResetParameters(7);
  model->to(*device);
  FlatParameters flat({model->DecayParameters(), model->NoDecayParameters()});
  BackboneAdamWOptions aopts;
  aopts.weight_decay = {0.2, 0.0};
  BackboneAdamW optimizer(&flat, aopts);
  GradSync grad_sync(sync_comm, &flat);
  if (Status s = grad_sync.BroadcastParameters(); !s.ok()) return Fail(s);
  PartialFcOptions popts;
  popts.num_classes = classes;
  popts.embedding_dim = vit->embed_dim;
  popts.sample_ratio = sample_ratio;
  popts.compute_threads = f.layer_threads;
  popts.layer = which;
  popts.device = which == PartialFcLayer::kDevice ? *device : torch::Device(torch::kCPU);
  popts.bf16_gemm = which == PartialFcLayer::kDevice && UsesBf16(*precision);
  auto fc = PartialFcObjective::Create(popts, comm->get());
  if (!fc.ok()) return Fail(fc.status());
  TrainStepParts parts{model, &flat, &optimizer, &grad_sync, fc->get(), PixelNormalisation{}};
  TrainStep step(parts, *device, *precision);

  torch::manual_seed(100 + f.rank);
  torch::Tensor images =
      PinnedCopy(torch::rand({batch, vit->channels, vit->image_size, vit->image_size}), *device);
  torch::Tensor labels =
      torch::randint(0, classes, {batch, labels_per_sample}, torch::kLong).to(torch::kInt);

  std::vector<double> total, h2d, fwd, layer, layer_coll, bwd, sync, opt, centre;
  // With --tensorboard-dir: wall seconds of whole steps (step + its progress event) with the
  // curves written and without, alternating, and the seconds spent in the curves.
  std::vector<double> with_curves, without_curves, in_curves;
  double last_loss = 0;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = step.Run(images, labels, 1e-4, 1e-4);
    if (!r.ok()) return Fail(r.status());
    last_loss = r->objective.loss;
    const nlohmann::json event = ProgressEvent(i + 1, r->objective.loss, r->timings.total, batch);
    const bool write = curves && i % 2 == 1;
    const auto before_curves = std::chrono::steady_clock::now();
    if (write) curves->OnEvent(event);
    const auto end = std::chrono::steady_clock::now();
    if (i < f.warmup) continue;
    if (curves) {
      (write ? with_curves : without_curves)
          .push_back(std::chrono::duration<double>(end - start).count());
      if (write) in_curves.push_back(std::chrono::duration<double>(end - before_curves).count());
    }
    const TrainStepTimings& t = r->timings;
    total.push_back(t.total);
    h2d.push_back(t.host_to_device);
    fwd.push_back(t.backbone_forward);
    layer.push_back(t.classification_layer);
    layer_coll.push_back(t.classification_collectives);
    bwd.push_back(t.backbone_backward);
    sync.push_back(t.grad_sync);
    opt.push_back(t.backbone_optimizer);
    centre.push_back(t.centre_optimizer);
  }
  const double step_s = Median(total);
  // The fused kernels are float32 code: under either bf16 precision ATen's operators run.
  const auto kernels = UsesBf16(*precision) ? mlcd::worker::VitKernels::kAten
                                            : mlcd::worker::ChosenVitKernels(
                                                  mlcd::worker::VitKernels::kAuto, *device);
  nlohmann::json j{{"preset", f.preset},
                   {"device", device->str()},
                   {"precision", PrecisionName(*precision)},
                   {"libtorch", compat::TorchVersion()},
                   {"fused_attention", compat::HasFusedAttention()},
                   {"vit_kernels", mlcd::worker::VitKernelsName(kernels)},
                   {"rank", f.rank},
                   {"world_size", f.world_size},
                   {"backbone_sync", sync_comm->backend_name()},
                   {"batch_per_rank", batch},
                   {"threads", at::get_num_threads()},
                   {"layer_threads", f.layer_threads},
                   {"layer", PartialFcLayerName(which)},
                   {"classes", classes},
                   {"steps", f.steps},
                   {"median_step_seconds", step_s},
                   {"images_per_second_rank", batch / std::max(1e-9, step_s)},
                   {"split_seconds",
                    {{"host_to_device", Median(h2d)},
                     {"backbone_forward", Median(fwd)},
                     {"classification_layer", Median(layer)},
                     {"classification_collectives", Median(layer_coll)},
                     {"backbone_backward", Median(bwd)},
                     {"grad_sync", Median(sync)},
                     {"backbone_optimizer", Median(opt)},
                     {"centre_optimizer", Median(centre)}}},
                   {"last_loss", last_loss},
                   {"peak_rss_mib", bench::PeakRssMiB()}};
  if (const int64_t peak = DevicePeakBytes(*device); peak >= 0)
    j["peak_device_mib"] = static_cast<double>(peak) / (1024.0 * 1024.0);
  if (curves) {
    if (Status s = curves->Close(); !s.ok()) return Fail(s);
    double sum = 0;
    for (double v : in_curves) sum += v;
    const double on = Median(with_curves), off = Median(without_curves);
    j["tensorboard"] = {
        {"every_steps", spec.training().tensorboard_every_steps()},
        {"file", curves->path()},
        {"median_step_seconds_with", on},
        {"median_step_seconds_without", off},
        {"overhead_percent", 100 * (on - off) / std::max(1e-12, off)},
        {"mean_seconds_in_curves_per_step", sum / std::max<size_t>(1, in_curves.size())},
        {"max_seconds_in_curves",
         in_curves.empty() ? 0.0 : *std::max_element(in_curves.begin(), in_curves.end())},
        {"steps_with", with_curves.size()},
        {"steps_without", without_curves.size()}};
  }
  std::cout << j.dump(2) << std::endl;
  if (!f.out.empty()) std::ofstream(f.out) << j.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace mlcd::worker

int main(int argc, char** argv) {
  mlcd::worker::BenchFlags f;
  CLI::App app("training-step benchmark of one rank on its device");
  app.add_option("--preset", f.preset, "model preset")->capture_default_str();
  app.add_option("--batch", f.batch, "images per rank per step")->capture_default_str();
  app.add_option("--steps", f.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--device", f.device, "auto, cpu, cuda, cuda:N")->capture_default_str();
  app.add_option("--precision", f.precision, "fp32, bf16 or bf16-activations")
      ->capture_default_str();
  app.add_option("--world-size", f.world_size, "ranks")->capture_default_str();
  app.add_option("--rank", f.rank, "this rank")->capture_default_str();
  app.add_option("--rendezvous", f.rendezvous, "rank 0's TCPStore HOST:PORT")
      ->capture_default_str();
  app.add_option("--classes", f.classes, "class centres K")->capture_default_str();
  app.add_option("--sample-ratio", f.sample_ratio, "PartialFC r")->capture_default_str();
  app.add_option("--labels-per-sample", f.labels_per_sample, "l")->capture_default_str();
  app.add_option("--threads", f.threads, "intra-op threads (0 = all)")->capture_default_str();
  app.add_option("--layer-threads", f.layer_threads,
                 "OpenMP threads of the classification layer's own work (0 = ATen's)")
      ->capture_default_str();
  app.add_option("--layer", f.layer,
                 "classification layer: host (fused CPU), device (ATen on --device), auto "
                 "(device on CUDA, host on the CPU)")
      ->capture_default_str();
  app.add_option("--spec", f.spec,
                 "job spec (YAML): its model, batch per rank, clustering k and l and loss r "
                 "replace --preset, --batch, --classes, --labels-per-sample, --sample-ratio");
  app.add_option("--tensorboard-dir", f.tensorboard_dir,
                 "timed steps alternate between writing rank 0's TensorBoard curves here "
                 "(every training.tensorboard_every_steps) and not; both medians are printed");
  app.add_option("--out", f.out, "JSON file");
  CLI11_PARSE(app, argc, argv);
  return mlcd::worker::Run(f);
}
