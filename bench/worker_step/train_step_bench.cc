// Training-step benchmark of one rank on its device (bench/RESULTS.md, "GPU step").
//
// Runs TrainStep (worker/train/train_step.h) -- the step `mlcd-worker train` runs -- on random
// images and labels: a ViT preset on --device under --precision, the PartialFC MLCD layer on
// the host over Gloo, the backbone's gradient sync over NCCL (CUDA, world size > 1) or Gloo.
// Prints and writes (--out) images/s of the rank and the median split of a step.
//
//   worker_step_bench --preset vit-b16 --batch 64 --device cuda --precision bf16 --steps 5
//   worker_step_bench ... --world-size 2 --rank R --rendezvous 127.0.0.1:29512   (per rank)
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/blas_env.h"
#include "common/job_spec.h"
#include "worker/loss/collectives.h"
#include "worker/loss/partial_fc.h"
#include "worker/model/vit.h"
#include "worker/torch_compat.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/grad_sync.h"
#include "worker/train/train_step.h"

namespace mlcd::worker {
namespace {

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
  int layer_threads = 1;  // PartialFcOptions::compute_threads
  std::string out;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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
  auto vit = VitOptionsFromSpec(spec.model());
  if (!vit.ok()) return Fail(vit.status());

  CollectivesOptions copts;
  copts.rank = f.rank;
  copts.world_size = f.world_size;
  copts.rendezvous = f.rendezvous;
  copts.timeout = std::chrono::seconds(300);
  copts.store_prefix = "bench";
  auto comm = Collectives::Create(copts);
  if (!comm.ok()) return Fail(comm.status());
  std::unique_ptr<Collectives> backbone_comm;
  if (device->is_cuda() && f.world_size > 1) {
    CollectivesOptions bopts = copts;
    bopts.cuda = true;
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
  popts.num_classes = f.classes;
  popts.embedding_dim = vit->embed_dim;
  popts.sample_ratio = f.sample_ratio;
  popts.compute_threads = f.layer_threads;
  auto fc = PartialFc::Create(popts, comm->get());
  if (!fc.ok()) return Fail(fc.status());
  TrainStepParts parts{model, &flat, &optimizer, &grad_sync, fc->get()};
  TrainStep step(parts, *device, *precision);

  torch::manual_seed(100 + f.rank);
  torch::Tensor images =
      PinnedCopy(torch::rand({f.batch, vit->channels, vit->image_size, vit->image_size}), *device);
  torch::Tensor labels =
      torch::randint(0, f.classes, {f.batch, f.labels_per_sample}, torch::kLong).to(torch::kInt);

  std::vector<double> total, h2d, fwd, layer, layer_coll, bwd, sync, opt, centre;
  double last_loss = 0;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    auto r = step.Run(images, labels, 1e-4, 1e-4);
    if (!r.ok()) return Fail(r.status());
    last_loss = r->fc.loss;
    if (i < f.warmup) continue;
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
  nlohmann::json j{{"preset", f.preset},
                   {"device", device->str()},
                   {"precision", PrecisionName(*precision)},
                   {"libtorch", compat::TorchVersion()},
                   {"fused_attention", compat::HasFusedAttention()},
                   {"rank", f.rank},
                   {"world_size", f.world_size},
                   {"backbone_sync", sync_comm->backend_name()},
                   {"batch_per_rank", f.batch},
                   {"threads", at::get_num_threads()},
                   {"layer_threads", f.layer_threads},
                   {"classes", f.classes},
                   {"steps", f.steps},
                   {"median_step_seconds", step_s},
                   {"images_per_second_rank", f.batch / std::max(1e-9, step_s)},
                   {"split_seconds",
                    {{"host_to_device", Median(h2d)},
                     {"backbone_forward", Median(fwd)},
                     {"classification_layer", Median(layer)},
                     {"classification_collectives", Median(layer_coll)},
                     {"backbone_backward", Median(bwd)},
                     {"grad_sync", Median(sync)},
                     {"backbone_optimizer", Median(opt)},
                     {"centre_optimizer", Median(centre)}}},
                   {"last_loss", last_loss}};
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
  app.add_option("--precision", f.precision, "fp32 or bf16")->capture_default_str();
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
  app.add_option("--out", f.out, "JSON file");
  CLI11_PARSE(app, argc, argv);
  return mlcd::worker::Run(f);
}
