// Classification-layer benchmark (bench/RESULTS.md, "Classification layer"):
//   step:     forward+backward+optimizer step of PartialFc, one process (W = 1), against the
//             PyTorch PartialFC v2-style anchor (partial_fc_v2_anchor.py) in the same run with
//             the same BLAS and threads, and against the matrix-multiply floor (the step's
//             three GEMMs timed alone in the same run);
//   variants: MLCD vs single-label softmax vs MLC, over 2 Gloo processes;
//   memory:   peak RSS per rank for K = 1M, D = 512, W = 2 (class centres + AdamW state).
// Prints the figures and writes them as JSON (--json).
//
//   bench_worker_loss --mode all --json bench/results/worker_loss.json
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "bench/process_memory.h"
#include "bench/stats.h"
#include "common/blas_env.h"
#include "common/file_util.h"
#include "common/malloc_env.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "worker/dist/collectives.h"
#include "worker/loss/partial_fc.h"

namespace mlcd::worker {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Args {
  std::string mode = "all";
  int64_t classes = 100000;
  int64_t batch = 512;
  int64_t dim = 512;
  double ratio = 0.1;
  int64_t labels = 8;
  int threads = 2;
  int compute_threads = 1;  // PartialFcOptions::compute_threads
  int steps = 10;
  int warmup = 2;
  int64_t memory_classes = 1000000;
  std::string json_path = std::string(MLCD_SOURCE_DIR) + "/bench/results/worker_loss.json";
  std::string python = "/usr/bin/python3";
  std::string anchor = std::string(MLCD_SOURCE_DIR) + "/bench/worker_loss/partial_fc_v2_anchor.py";
  bool skip_anchor = false;
  // Internal: a rank of the variants/memory modes.
  int rank = -1;
  std::string rendezvous, result_path;
};

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

using ::mlcd::bench::Median;

// ATen's intra-op threads and OpenBLAS's own pool.
void SetComputeThreads(int threads) {
  mlcd::SetBlasThreads(threads);
  at::set_num_threads(threads);
}

// Random labels: l distinct-ish classes per sample (collisions allowed: they are deduplicated).
at::Tensor RandomLabels(int64_t rows, int64_t l, int64_t classes, at::Generator& gen) {
  return at::randint(0, classes, {rows, l}, gen, at::kLong);
}

struct StepTiming {
  double median_ms = 0, mean_ms = 0, fb_ms = 0, opt_ms = 0, collective_ms = 0;
  int64_t sampled = 0;
  double last_loss = 0;
};

// Times `steps` steps (after `warmup`) of ForwardBackward + OptimizerStep on this rank.
StatusOr<StepTiming> TimeSteps(PartialFc& pfc, Collectives& comm, int64_t local_batch, int64_t l,
                               int warmup, int steps, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed + comm.rank());
  std::vector<double> total, fb, opt, coll;
  StepTiming t;
  for (int s = 0; s < warmup + steps; ++s) {
    at::Tensor emb = at::randn({local_batch, pfc.options().embedding_dim}, gen, at::kFloat);
    at::Tensor labels = RandomLabels(local_batch, l, pfc.options().num_classes, gen);
    MLCD_RETURN_IF_ERROR(comm.Barrier());
    auto t0 = Clock::now();
    auto r = pfc.ForwardBackward(emb, labels);
    if (!r.ok()) return r.status();
    auto t1 = Clock::now();
    MLCD_RETURN_IF_ERROR(pfc.OptimizerStep(1e-3));
    auto t2 = Clock::now();
    if (s >= warmup) {
      total.push_back(Ms(t0, t2));
      fb.push_back(Ms(t0, t1));
      opt.push_back(Ms(t1, t2));
      coll.push_back(r->collective_seconds * 1000);
      t.sampled = r->stats.sampled_classes;
      t.last_loss = r->loss;
    }
  }
  t.median_ms = Median(total);
  t.mean_ms = std::accumulate(total.begin(), total.end(), 0.0) / std::max<size_t>(1, total.size());
  t.fb_ms = Median(fb);
  t.opt_ms = Median(opt);
  t.collective_ms = Median(coll);
  return t;
}

PartialFcOptions LayerOptions(const Args& a, int64_t classes, LossVariant v) {
  PartialFcOptions o;
  o.num_classes = classes;
  o.embedding_dim = a.dim;
  o.sample_ratio = a.ratio;
  o.variant = v;
  o.margin_type = MarginType::kArc;
  o.scale = 32;
  o.margin = 0.3;
  o.seed = 1;
  o.compute_threads = a.compute_threads;
  return o;
}

// ---- (a) one process against the anchor and the GEMM floor.
StatusOr<json> StepMode(const Args& a) {
  auto comm = Collectives::Local();
  MLCD_ASSIGN_OR_RETURN(
      auto pfc, PartialFc::Create(LayerOptions(a, a.classes, LossVariant::kMlcd), comm.get()));
  MLCD_ASSIGN_OR_RETURN(StepTiming ours,
                        TimeSteps(*pfc, *comm, a.batch, a.labels, a.warmup, a.steps, 7));
  // The device layer (ATen ops) on the same CPU tensors: the same inputs and draws.
  PartialFcOptions device_options = LayerOptions(a, a.classes, LossVariant::kMlcd);
  device_options.layer = PartialFcLayer::kDevice;
  MLCD_ASSIGN_OR_RETURN(auto device_layer, PartialFc::Create(device_options, comm.get()));
  MLCD_ASSIGN_OR_RETURN(StepTiming device,
                        TimeSteps(*device_layer, *comm, a.batch, a.labels, a.warmup, a.steps, 7));

  // The floor: the step's three GEMMs alone (logits, dL/de, dL/dw) at the sampled size.
  const int64_t B = a.batch, D = a.dim, m = ours.sampled;
  at::Tensor e = at::randn({B, D}), w = at::randn({m, D}), g = at::randn({B, m});
  std::vector<double> gemm;
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    auto t0 = Clock::now();
    at::Tensor c = at::mm(e, w.t());
    at::Tensor ge = at::mm(g, w);
    at::Tensor gw = at::mm(g.t(), e);
    auto t1 = Clock::now();
    if (s >= a.warmup) gemm.push_back(Ms(t0, t1));
  }
  const double gflop = 3.0 * 2.0 * B * m * D / 1e9;
  const double floor_ms = Median(gemm);
  json out = {
      {"batch", B},
      {"dim", D},
      {"classes", a.classes},
      {"ratio", a.ratio},
      {"labels", a.labels},
      {"threads", a.threads},
      {"compute_threads", a.compute_threads},
      {"steps", a.steps},
      {"sampled_classes", m},
      {"ours_step_ms_median", ours.median_ms},
      {"ours_step_ms_mean", ours.mean_ms},
      {"ours_forward_backward_ms", ours.fb_ms},
      {"ours_optimizer_ms", ours.opt_ms},
      {"gemm_floor_ms", floor_ms},
      {"gemm_gflop_per_step", gflop},
      {"sgemm_gflops", gflop / (floor_ms / 1000)},
      {"ours_over_floor", ours.median_ms / floor_ms},
      {"device_layer_step_ms_median", device.median_ms},
      {"device_layer_forward_backward_ms", device.fb_ms},
      {"device_layer_optimizer_ms", device.opt_ms},
      {"device_over_host", device.median_ms / ours.median_ms},
  };
  std::printf("classification layer step (B=%lld D=%lld K=%lld r=%.2f l=%lld, %d threads, W=1)\n",
              static_cast<long long>(B), static_cast<long long>(D),
              static_cast<long long>(a.classes), a.ratio, static_cast<long long>(a.labels),
              a.threads);
  std::printf(
      "  ours:  %8.1f ms/step median (forward+backward %.1f, sparse AdamW %.1f), %lld sampled "
      "classes\n",
      ours.median_ms, ours.fb_ms, ours.opt_ms, static_cast<long long>(m));
  std::printf(
      "  device layer on CPU tensors: %8.1f ms/step median (forward+backward %.1f, sparse AdamW "
      "%.1f); device/host = %.2fx (target <= 1.5x)\n",
      device.median_ms, device.fb_ms, device.opt_ms, device.median_ms / ours.median_ms);
  std::printf(
      "  floor: %8.1f ms for the 3 GEMMs (%.1f GFLOP at %.1f GFLOP/s); ours/floor = %.2fx\n",
      floor_ms, gflop, gflop / (floor_ms / 1000), ours.median_ms / floor_ms);
  std::fflush(stdout);

  if (!a.skip_anchor) {
    std::string cmd = a.python + " " + a.anchor + " --classes " + std::to_string(a.classes) +
                      " --batch " + std::to_string(a.batch) + " --dim " + std::to_string(a.dim) +
                      " --ratio " + std::to_string(a.ratio) + " --labels " +
                      std::to_string(a.labels) + " --threads " + std::to_string(a.threads) +
                      " --steps " + std::to_string(a.steps) + " --warmup " +
                      std::to_string(a.warmup);
    std::string env = "OMP_NUM_THREADS=" + std::to_string(a.threads) +
                      " OPENBLAS_NUM_THREADS=" + std::to_string(a.threads) + " ";
    FILE* pipe = popen((env + cmd).c_str(), "r");
    if (pipe == nullptr) return Status::Internal("cannot run the anchor: " + cmd);
    std::string text;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), pipe)) text.append(buf, n);
    int rc = pclose(pipe);
    json anchor = json::parse(text, nullptr, false);
    if (rc != 0 || anchor.is_discarded() || !anchor.contains("step_ms_median")) {
      return Status::Internal("the anchor failed (exit " + std::to_string(rc) + "): " + cmd + "\n" +
                              text);
    }
    double anchor_ms = anchor["step_ms_median"].get<double>();
    out["anchor"] = anchor;
    out["anchor_step_ms_median"] = anchor_ms;
    out["ours_over_anchor"] = ours.median_ms / anchor_ms;
    std::printf(
        "  anchor (PyTorch, PartialFC v2 style, dense grad + AdamW over the whole weight): %.1f "
        "ms/step\n",
        anchor_ms);
    std::printf("  ours/anchor = %.2fx (target <= 0.5x); ours/floor = %.2fx (target <= 2x)\n",
                ours.median_ms / anchor_ms, ours.median_ms / floor_ms);
  }
  return out;
}

// ---- (b), (c): ranks forked from this binary.
int RunRankProcesses(const Args& a, const std::string& rank_mode, int world,
                     std::vector<json>* results) {
  int port = PickFreePort();
  std::string rendezvous = "127.0.0.1:" + std::to_string(port);
  char tmpl[] = "/tmp/mlcd-bench-loss-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  std::vector<pid_t> pids;
  std::vector<std::string> paths;
  for (int r = 0; r < world; ++r) {
    paths.push_back(std::string(tmpl) + "/rank" + std::to_string(r) + ".json");
    std::vector<std::string> args = {"bench_worker_loss"};
    for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
             {"--mode", rank_mode},
             {"--rank", std::to_string(r)},
             {"--rendezvous", rendezvous},
             {"--result", paths.back()},
             {"--classes", std::to_string(a.classes)},
             {"--memory-classes", std::to_string(a.memory_classes)},
             {"--batch", std::to_string(a.batch)},
             {"--dim", std::to_string(a.dim)},
             {"--ratio", std::to_string(a.ratio)},
             {"--labels", std::to_string(a.labels)},
             {"--threads", std::to_string(a.threads)},
             {"--compute-threads", std::to_string(a.compute_threads)},
             {"--steps", std::to_string(a.steps)},
             {"--warmup", std::to_string(a.warmup)}}) {
      args.push_back(flag);
      args.push_back(value);
    }
    SpawnOptions spawn;
    spawn.argv = std::move(args);
    spawn.executable = "/proc/self/exe";
    StatusOr<pid_t> pid = Spawn(spawn);
    pids.push_back(pid.ok() ? *pid : -1);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    const int status = pid > 0 ? WaitForExit(pid) : -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  for (const std::string& p : paths) {
    auto text = ReadFileToString(p);
    if (!text.ok()) {
      ++failures;
      continue;
    }
    results->push_back(json::parse(*text, nullptr, false));
    unlink(p.c_str());
  }
  rmdir(tmpl);
  return failures;
}

Status RankMain(const Args& a) {
  SetComputeThreads(a.threads);
  CollectivesOptions co;
  co.rank = a.rank;
  co.world_size = 2;
  co.rendezvous = a.rendezvous;
  co.timeout = std::chrono::seconds(600);
  MLCD_ASSIGN_OR_RETURN(auto comm, Collectives::Create(co));
  json out;
  const int64_t local_batch = a.batch / 2;
  if (a.mode == "variants-rank") {
    // The three layers side by side, their steps interleaved, so that load changes on a shared
    // machine hit all of them alike.
    struct Case {
      const char* name;
      LossVariant variant;
      int64_t labels;
      std::unique_ptr<PartialFc> pfc;
      std::vector<double> total, fb, opt, coll;
      int64_t sampled = 0;
    };
    std::vector<Case> cases;
    cases.push_back({"softmax_single_label", LossVariant::kSoftmax, 1, nullptr, {}, {}, {}, {}, 0});
    cases.push_back({"mlcd", LossVariant::kMlcd, a.labels, nullptr, {}, {}, {}, {}, 0});
    cases.push_back({"mlc", LossVariant::kMlc, a.labels, nullptr, {}, {}, {}, {}, 0});
    for (Case& c : cases) {
      MLCD_ASSIGN_OR_RETURN(c.pfc,
                            PartialFc::Create(LayerOptions(a, a.classes, c.variant), comm.get()));
    }
    at::Generator gen = at::detail::createCPUGenerator(11 + a.rank);
    for (int s = 0; s < a.warmup + a.steps; ++s) {
      at::Tensor emb = at::randn({local_batch, a.dim}, gen, at::kFloat);
      at::Tensor labels = RandomLabels(local_batch, a.labels, a.classes, gen);
      for (Case& c : cases) {
        at::Tensor l = labels.narrow(1, 0, c.labels);
        MLCD_RETURN_IF_ERROR(comm->Barrier());
        auto t0 = Clock::now();
        auto r = c.pfc->ForwardBackward(emb, l);
        if (!r.ok()) return r.status();
        auto t1 = Clock::now();
        MLCD_RETURN_IF_ERROR(c.pfc->OptimizerStep(1e-3));
        auto t2 = Clock::now();
        if (s >= a.warmup) {
          c.total.push_back(Ms(t0, t2));
          c.fb.push_back(Ms(t0, t1));
          c.opt.push_back(Ms(t1, t2));
          c.coll.push_back(r->collective_seconds * 1000);
          c.sampled = r->stats.sampled_classes;
        }
      }
    }
    for (Case& c : cases) {
      out[c.name] = {{"step_ms_median", Median(c.total)}, {"forward_backward_ms", Median(c.fb)},
                     {"optimizer_ms", Median(c.opt)},     {"collective_ms", Median(c.coll)},
                     {"sampled_classes", c.sampled},      {"labels", c.labels}};
    }
  } else {  // memory-rank
    const double before = bench::PeakRssMiB();
    MLCD_ASSIGN_OR_RETURN(
        auto pfc,
        PartialFc::Create(LayerOptions(a, a.memory_classes, LossVariant::kMlcd), comm.get()));
    MLCD_ASSIGN_OR_RETURN(StepTiming t, TimeSteps(*pfc, *comm, local_batch, a.labels, 1, 3, 13));
    const int64_t n = pfc->class_range().size();
    out = {{"rank", a.rank},
           {"shard_classes", n},
           {"state_mib", (3.0 * n * a.dim * 4 + n * 8) / (1 << 20)},
           {"peak_rss_mib", bench::PeakRssMiB()},
           {"rss_before_layer_mib", before},
           {"step_ms_median", t.median_ms}};
  }
  return WriteFileAtomically(a.result_path, out.dump() + "\n");
}

int Main(const Args& a) {
  SetComputeThreads(a.threads);
  if (a.rank >= 0) {
    Status s = RankMain(a);
    if (!s.ok()) std::cerr << "bench rank " << a.rank << ": " << s.ToString() << "\n";
    return s.ok() ? 0 : 1;
  }
  json report;
  report["note"] = "development machine shared with other sessions: figures may be noisy";
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  report["openblas_coretype"] = coretype ? coretype : "";
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  report["omp_wait_policy"] = wait_policy ? wait_policy : "(unset)";
  std::printf("OPENBLAS_CORETYPE=%s OMP_WAIT_POLICY=%s\n", coretype ? coretype : "(unset)",
              wait_policy ? wait_policy : "(unset)");
  int rc = 0;
  if (a.mode == "all" || a.mode == "step") {
    auto step = StepMode(a);
    if (!step.ok()) {
      std::cerr << step.status().ToString() << "\n";
      rc = 1;
    } else {
      report["step"] = *step;
    }
  }
  if (a.mode == "all" || a.mode == "variants") {
    std::vector<json> ranks;
    if (RunRankProcesses(a, "variants-rank", 2, &ranks) != 0 || ranks.empty()) {
      std::cerr << "variants: a rank failed\n";
      rc = 1;
    } else {
      json v = ranks[0];
      double mlcd = v["mlcd"]["step_ms_median"],
             single = v["softmax_single_label"]["step_ms_median"], mlc = v["mlc"]["step_ms_median"];
      v["mlcd_over_single"] = mlcd / single;
      v["mlcd_over_mlc"] = mlcd / mlc;
      v["paper_mlcd_over_single"] = 1.09;
      v["paper_mlcd_over_mlc"] = 0.59;
      report["variants_w2"] = v;
      std::printf(
          "variants over 2 Gloo processes (B=%lld global, K=%lld, r=%.2f): single-label %.1f ms, "
          "MLCD %.1f ms, "
          "MLC %.1f ms per step (rank 0, median)\n",
          static_cast<long long>(a.batch), static_cast<long long>(a.classes), a.ratio, single, mlcd,
          mlc);
      std::printf("  MLCD/single = %.2f (paper 1.09), MLCD/MLC = %.2f (paper 0.59)\n",
                  mlcd / single, mlcd / mlc);
    }
  }
  if (a.mode == "all" || a.mode == "memory") {
    std::vector<json> ranks;
    if (RunRankProcesses(a, "memory-rank", 2, &ranks) != 0 || ranks.size() != 2) {
      std::cerr << "memory: a rank failed\n";
      rc = 1;
    } else {
      report["memory_w2"] = ranks;
      for (const json& r : ranks) {
        std::printf(
            "memory K=%lld D=%lld W=2, rank %d: %lld classes, centres+AdamW state %.0f MiB, peak "
            "RSS %.0f MiB\n",
            static_cast<long long>(a.memory_classes), static_cast<long long>(a.dim),
            r["rank"].get<int>(), static_cast<long long>(r["shard_classes"].get<int64_t>()),
            r["state_mib"].get<double>(), r["peak_rss_mib"].get<double>());
      }
    }
  }
  if (!a.json_path.empty()) {
    std::string dir = a.json_path.substr(0, a.json_path.find_last_of('/'));
    if (!dir.empty() && dir != a.json_path) (void)MakeDirs(dir);
    Status s = WriteFileAtomically(a.json_path, report.dump(2) + "\n");
    if (!s.ok()) {
      std::cerr << s.ToString() << "\n";
      rc = 1;
    } else {
      std::printf("wrote %s\n", a.json_path.c_str());
    }
  }
  return rc;
}

}  // namespace
}  // namespace mlcd::worker

int main(int argc, char** argv) {
  // --omp-passive: OMP_WAIT_POLICY=PASSIVE for this process, its ranks and the anchor. libgomp
  // reads it when it loads, so the process re-executes itself with it set.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--omp-passive" && std::getenv("OMP_WAIT_POLICY") == nullptr) {
      setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
      execv("/proc/self/exe", argv);
    }
  }
  mlcd::SelectOpenblasCoretype(argc, argv);
  mlcd::KeepFreedMemoryForReuse();  // common/malloc_env.h
  mlcd::worker::Args a;
  CLI::App app{
      "Classification-layer benchmark: PartialFc vs a PyTorch PartialFC v2 anchor, variants, "
      "memory"};
  app.add_option("--mode", a.mode, "all | step | variants | memory")->capture_default_str();
  app.add_option("--classes", a.classes, "K for step and variants")->capture_default_str();
  app.add_option("--memory-classes", a.memory_classes, "K for the memory mode")
      ->capture_default_str();
  app.add_option("--batch", a.batch, "global batch B")->capture_default_str();
  app.add_option("--dim", a.dim, "embedding dimension D")->capture_default_str();
  app.add_option("--ratio", a.ratio, "sample ratio r")->capture_default_str();
  app.add_option("--labels", a.labels, "labels per sample l")->capture_default_str();
  app.add_option("--threads", a.threads, "intra-op and BLAS threads")->capture_default_str();
  app.add_option("--compute-threads", a.compute_threads,
                 "PartialFcOptions::compute_threads (OpenMP threads of the layer's elementwise "
                 "work; 0 = all)")
      ->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--json", a.json_path, "where to write the JSON results ('' = nowhere)")
      ->capture_default_str();
  app.add_option("--python", a.python, "python with torch for the anchor")->capture_default_str();
  app.add_option("--anchor", a.anchor, "the anchor script")->capture_default_str();
  app.add_flag("--skip-anchor", a.skip_anchor, "do not run the PyTorch anchor");
  bool omp_passive = false;
  app.add_flag("--omp-passive", omp_passive,
               "run everything (ours, ranks, anchor) with OMP_WAIT_POLICY=PASSIVE (idle OpenMP "
               "threads sleep "
               "instead of spinning against the BLAS threads)");
  app.add_option("--rank", a.rank, "internal")->group("");
  app.add_option("--rendezvous", a.rendezvous, "internal")->group("");
  app.add_option("--result", a.result_path, "internal")->group("");
  CLI11_PARSE(app, argc, argv);
  return mlcd::worker::Main(a);
}
