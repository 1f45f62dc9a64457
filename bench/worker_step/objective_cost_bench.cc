// What each training objective costs in a step (bench/RESULTS.md, "Multi-label objectives"):
// TrainStep (worker/train/train_step.h) -- the step `mlcd-worker train` runs -- with the
// objective ObjectiveFromSpec builds for each loss.variant, on one rank holding the whole
// gathered batch of random images and multi-label rows (1 to `max_labels` distinct labels of
// `classes`, padded with -1, like Fashion mosaics' sets). Reports the median step, the
// objective's share of it (its ForwardBackward, collectives and optimizer step) and the peak
// resident memory of a process that ran only that objective: each variant runs in a child
// process of its own (this binary again, with --variant).
//
//   objective_cost_bench --out bench/results/objective_cost.json
//   objective_cost_bench --variants bce,mulsupcon --batch 256 --steps 5
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/process_memory.h"
#include "bench/stats.h"
#include "common/blas_env.h"
#include "common/job_spec.h"
#include "common/subprocess.h"
#include "worker/dist/collectives.h"
#include "worker/model/vit.h"
#include "worker/train/backbone_optimizer.h"
#include "worker/train/grad_sync.h"
#include "worker/train/objective_factory.h"
#include "worker/train/pseudo_label_order.h"
#include "worker/train/train_step.h"

namespace mlcd::worker {
namespace {

struct CostFlags {
  std::string variants = "mlcd,bce,mulcon-step1,mulcon,mulsupcon,supcon-all,supcon-any,infonce";
  std::string variant;  // set: run this one in this process (the child mode)
  int batch = 256;      // images of the gathered batch (contrastive variants: two views each)
  int classes = 10;
  int max_labels = 4;
  int steps = 5;
  int warmup = 2;
  int threads = 0;
  // The backbone: ViT-tiny on 56 x 56 grey images in 14 x 14 patches, as the benchmark table's
  // rows on Fashion mosaics.
  int image_size = 56;
  int patch_size = 14;
  int embed_dim = 256;
  std::string out;
};

using ::mlcd::bench::Median;

int Fail(const Status& s) {
  std::fprintf(stderr, "objective_cost_bench: %s\n", s.ToString().c_str());
  return 1;
}

// The spec of one row: "mulcon-step1" is mulcon in its step 1 (BCE alone), "mulcon" in its
// step 2 (BCE + LLCL).
StatusOr<v1::JobSpec> SpecFor(const CostFlags& f, const std::string& variant) {
  v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_preset("vit-tiny");
  m->set_image_size(f.image_size);
  m->set_patch_size(f.patch_size);
  m->set_channels(1);
  m->set_embed_dim(f.embed_dim);
  auto* loss = spec.mutable_loss();
  const bool step1 = variant == "mulcon-step1";
  loss->set_variant(step1 ? "mulcon" : variant);
  if (variant == "mlcd") loss->set_sample_ratio(1.0);
  if (loss->variant() == "mulcon") {
    loss->mutable_mulcon()->set_label_dim(64);
    loss->mutable_mulcon()->set_heads(4);
    loss->mutable_mulcon()->set_projection_dim(64);
    loss->mutable_mulcon()->set_pretrain_fraction(step1 ? 0.99 : 0.0);
  }
  if (variant != "infonce") {
    spec.mutable_clustering()->set_label_set("bench");
    spec.mutable_clustering()->set_k(f.classes);
    spec.mutable_clustering()->set_l(f.max_labels);
  }
  spec.mutable_training()->set_batch_size(f.batch);
  spec.mutable_training()->set_world_size(1);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

// Rows of 1..max_labels distinct labels, padded with -1.
torch::Tensor RandomLabelRows(int64_t rows, int classes, int max_labels) {
  torch::Tensor out = torch::full({rows, max_labels}, -1, torch::kInt);
  auto a = out.accessor<int, 2>();
  for (int64_t i = 0; i < rows; ++i) {
    const torch::Tensor perm = torch::randperm(classes, torch::kLong);
    const int n = 1 + static_cast<int>(torch::randint(0, max_labels, {1}).item<int64_t>());
    for (int j = 0; j < n && j < classes; ++j) a[i][j] = static_cast<int>(perm[j].item<int64_t>());
  }
  return out;
}

// One variant in this process: prints one JSON line on stdout.
int RunOne(const CostFlags& f) {
  if (f.threads > 0) {
    at::set_num_threads(f.threads);
    SetBlasThreads(f.threads);
  }
  auto spec = SpecFor(f, f.variant);
  if (!spec.ok()) return Fail(spec.status());
  auto vit = VitOptionsFromSpec(spec->model());
  if (!vit.ok()) return Fail(vit.status());
  CollectivesOptions copts;
  copts.store_prefix = "objective-cost";
  auto comm = Collectives::Create(copts);
  if (!comm.ok()) return Fail(comm.status());
  const torch::Device cpu(torch::kCPU);
  VisionTransformer model(*vit);
  model->ResetParameters(7);
  FlatParameters flat({model->DecayParameters(), model->NoDecayParameters()});
  BackboneAdamW optimizer(&flat, BackboneAdamWOptions{});
  GradSync grad_sync(comm->get(), &flat);
  ObjectiveContext context;
  context.vit = *vit;
  context.device = cpu;
  context.job_total_steps = 1000;
  context.comm = comm->get();
  auto objective = ObjectiveFromSpec(*spec, context);
  if (!objective.ok()) return Fail(objective.status());
  TrainStepParts parts{
      model, &flat, &optimizer, &grad_sync, objective->get(), PixelNormalisation{}};
  TrainStep step(parts, cpu, Precision::kFp32);

  const int views = ViewsPerImage(*spec);
  const int64_t rows = static_cast<int64_t>(f.batch) * views;
  torch::manual_seed(11);
  const torch::Tensor images = torch::rand({rows, 1, vit->image_size, vit->image_size});
  torch::Tensor labels;
  if (NeedsLabels(*spec)) {
    // Both views of an image carry its labels (rows interleaved: image i is rows 2i, 2i + 1).
    labels = RandomLabelRows(f.batch, f.classes, f.max_labels).repeat_interleave(views, 0);
  }
  std::vector<double> total, objective_s, forward, backward;
  double loss = 0;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    auto r = step.Run(images, labels, 1e-4, 1e-4);
    if (!r.ok()) return Fail(r.status());
    loss = r->objective.loss;
    if (i < f.warmup) continue;
    const TrainStepTimings& t = r->timings;
    total.push_back(t.total);
    objective_s.push_back(t.classification_layer + t.classification_collectives +
                          t.centre_optimizer);
    forward.push_back(t.backbone_forward);
    backward.push_back(t.backbone_backward);
  }
  const double step_s = Median(total), obj_s = Median(objective_s);
  nlohmann::json j{{"variant", f.variant},
                   {"objective", (*objective)->Describe()},
                   {"gathered_images", f.batch},
                   {"rows", rows},
                   {"threads", at::get_num_threads()},
                   {"median_step_seconds", step_s},
                   {"median_objective_seconds", obj_s},
                   {"objective_share", obj_s / std::max(1e-12, step_s)},
                   {"median_backbone_forward_seconds", Median(forward)},
                   {"median_backbone_backward_seconds", Median(backward)},
                   {"objective_parameters",
                    [&] {
                      int64_t n = 0;
                      for (const auto& p : (*objective)->Parameters()) n += p.numel();
                      return n;
                    }()},
                   {"peak_rss_mib", bench::PeakRssMiB()},
                   {"last_loss", loss}};
  std::cout << j.dump() << std::endl;
  return 0;
}

// Runs `self --variant v ...` and returns its JSON line.
StatusOr<nlohmann::json> RunChild(const std::string& self, const CostFlags& f,
                                  const std::string& variant) {
  std::vector<std::string> args = {self,
                                   "--variant",
                                   variant,
                                   "--batch",
                                   std::to_string(f.batch),
                                   "--steps",
                                   std::to_string(f.steps),
                                   "--warmup",
                                   std::to_string(f.warmup),
                                   "--threads",
                                   std::to_string(f.threads),
                                   "--classes",
                                   std::to_string(f.classes),
                                   "--max-labels",
                                   std::to_string(f.max_labels)};
  int fds[2];
  if (pipe(fds) != 0) return Status::Internal("pipe failed");
  SpawnOptions spawn;
  spawn.argv = args;
  spawn.stdout_fd = fds[1];
  spawn.close_fds = {fds[0], fds[1]};
  StatusOr<pid_t> pid = Spawn(spawn);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  const int status = WaitForExit(*pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Status::Internal("the " + variant + " child failed (status " + std::to_string(status) +
                            ")");
  const size_t brace = out.rfind("\n{");
  return nlohmann::json::parse(brace == std::string::npos ? out : out.substr(brace + 1));
}

// MCL's feature-aware batch order (worker/train/pseudo_label_order.h): the seconds to make one
// epoch's order of `samples` ids in `groups` pseudo-labels (once per epoch), and apart from it
// the seconds to take rank 0's share of every global batch (once per step), per batch.
StatusOr<nlohmann::json> TimeBatchOrder(int64_t samples, int64_t groups, int64_t batch) {
  std::vector<int64_t> labels(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i)
    labels[static_cast<size_t>(i)] = static_cast<int64_t>((i * 2654435761ull) % groups);
  PseudoLabelOrderOptions o;
  o.global_batch_size = batch;
  o.seed = 1;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  MLCD_ASSIGN_OR_RETURN(PseudoLabelOrder order, PseudoLabelOrder::Make(labels, o));
  const double make_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto shares = Clock::now();
  int64_t touched = 0;
  for (int64_t b = 0; b < order.num_batches(); ++b)
    touched += static_cast<int64_t>(order.RankShare(b, 2, 0).size());
  const double share_seconds = std::chrono::duration<double>(Clock::now() - shares).count();
  const int64_t batches = std::max<int64_t>(1, order.num_batches());
  return nlohmann::json{{"samples", samples},
                        {"groups", groups},
                        {"global_batch", batch},
                        {"batches", order.num_batches()},
                        {"rank0_rows", touched},
                        {"epoch_seconds", make_seconds},
                        {"seconds_per_batch", make_seconds / batches},
                        {"rank_share_seconds_per_batch", share_seconds / batches}};
}

int RunAll(const CostFlags& f) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return Fail(Status::Internal("cannot find this binary"));
  self[len] = '\0';
  nlohmann::json rows = nlohmann::json::array();
  std::stringstream variants(f.variants);
  std::string v;
  std::printf("%-14s %10s %12s %8s %10s  %s\n", "variant", "step s", "objective s", "share",
              "peak MiB", "objective");
  while (std::getline(variants, v, ',')) {
    auto row = RunChild(self, f, v);
    if (!row.ok()) return Fail(row.status());
    std::printf("%-14s %10.3f %12.3f %7.1f%% %10.0f  %s\n", v.c_str(),
                (*row)["median_step_seconds"].get<double>(),
                (*row)["median_objective_seconds"].get<double>(),
                100 * (*row)["objective_share"].get<double>(), (*row)["peak_rss_mib"].get<double>(),
                (*row)["objective"].get<std::string>().c_str());
    std::fflush(stdout);
    rows.push_back(*row);
  }
  // The batch order beside the InfoNCE step it feeds: this benchmark's sizes, and ImageNet's.
  nlohmann::json orders = nlohmann::json::array();
  for (const auto& [samples, groups] :
       std::vector<std::pair<int64_t, int64_t>>{{5000, 27}, {1281167, 125}}) {
    auto t = TimeBatchOrder(samples, groups, f.batch);
    if (!t.ok()) return Fail(t.status());
    std::printf(
        "batch order: %lld samples, %lld groups, batch %d: made in %.4f s an epoch (%.2e s a "
        "batch); rank 0's share %.2e s a batch\n",
        static_cast<long long>(samples), static_cast<long long>(groups), f.batch,
        (*t)["epoch_seconds"].get<double>(), (*t)["seconds_per_batch"].get<double>(),
        (*t)["rank_share_seconds_per_batch"].get<double>());
    orders.push_back(*t);
  }
  if (!f.out.empty()) {
    std::ofstream o(f.out);
    o << nlohmann::json{{"bench", "objective_cost"}, {"rows", rows}, {"batch_order", orders}}.dump(
             2)
      << "\n";
    if (!o) return Fail(Status::Internal("writing " + f.out));
  }
  return 0;
}

}  // namespace
}  // namespace mlcd::worker

int main(int argc, char** argv) {
  mlcd::worker::CostFlags f;
  CLI::App app{
      "What each training objective costs in a step: median step, the objective's "
      "share, peak memory (one child process per variant)"};
  app.add_option("--variants", f.variants,
                 "comma-separated loss.variant values (mulcon-step1: "
                 "mulcon's BCE-only step 1)");
  app.add_option("--variant", f.variant, "run only this variant in this process (child mode)");
  app.add_option("--batch", f.batch, "images of the gathered batch");
  app.add_option("--classes", f.classes, "labels (K)");
  app.add_option("--max-labels", f.max_labels, "most labels of a row");
  app.add_option("--steps", f.steps, "timed steps");
  app.add_option("--warmup", f.warmup, "untimed steps first");
  app.add_option("--threads", f.threads, "intra-op threads (0 = all cores)");
  app.add_option("--out", f.out, "write the JSON here");
  CLI11_PARSE(app, argc, argv);
  return f.variant.empty() ? mlcd::worker::RunAll(f) : mlcd::worker::RunOne(f);
}
