// Probes for bench/clusterd/gang_kmeans_bench.py (issue 28, "Gang k-means on the CPU"): each
// subcommand measures one thing in a fresh process and prints one JSON object on stdout.
//
//   gang_kmeans_probe sgemm --rows R --d D --k K --threads T [--seconds S]
//       at::mm(R x D, (K x D).t()), the GEMM of the gang engine's nearest-centroid search
//       (worker/cluster/nearest.cc), with ATen and OpenBLAS both set to T threads: the
//       machine's sgemm ceiling for that shape (median seconds per GEMM, GFLOP/s).
//   gang_kmeans_probe nearest-splits --rows R --d D --k K --threads T [--seconds S]
//       The steps of one chunk of the engine's k-means search, timed one by one (the GEMM,
//       the row max, the objective, the float64 sums and the counts; and ATen's at::max, which
//       the row max replaced on the CPU), to see where an iteration's time goes beyond the
//       GEMM.
//   gang_kmeans_probe faiss-kmeans --features F.npy --k K --niter N --threads T
//       [--max-points-per-centroid M] [--seed S]
//       clusterd's FAISS k-means (clusterd/kmeans.h) on the same rows, sample and k as
//       `mlcd-worker cluster-gang`: seconds at the end of every iteration.
//
// Like the services, the probe picks OPENBLAS_CORETYPE at start-up (common/blas_env.h) so
// every configuration runs the same BLAS kernels, and keeps freed memory for reuse
// (common/malloc_env.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "clusterd/kmeans.h"
#include "common/blas_env.h"
#include "common/malloc_env.h"
#include "worker/cluster/nearest.h"

namespace {

using Clock = std::chrono::steady_clock;

struct ShapeArgs {
  int64_t rows = 0, d = 128, k = 4096;
  int64_t workspace_mb = 0;
  int threads = 1;
  double seconds = 3;
};

using ::mlcd::bench::Median;

// Seconds of one call of `fn`, repeated (after one warm-up call) until `budget` seconds have
// passed and at least 3 times: the median.
double TimeMedian(double budget, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  const auto start = Clock::now();
  while (t.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < budget) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return Median(t);
}

// The chunk rows the engine's search uses on the CPU for k centroids
// (worker/cluster/nearest.h), unless --rows says otherwise.
int64_t ChunkRowsOf(const ShapeArgs& a) {
  namespace cluster = mlcd::worker::cluster;
  if (a.rows > 0) return a.rows;
  const int64_t workspace =
      a.workspace_mb > 0 ? a.workspace_mb << 20 : cluster::kDefaultWorkspaceBytes;
  return cluster::ChunkRows(std::min(workspace, cluster::kCpuScoreBlockBytes), a.k);
}

void SetThreads(int threads) {
  at::set_num_threads(threads);
  mlcd::SetBlasThreads(threads);  // OpenBLAS keeps its own pool (common/blas_env.h)
}

int RunSgemm(ShapeArgs a) {
  SetThreads(a.threads);
  a.rows = ChunkRowsOf(a);
  at::Tensor rows = at::randn({a.rows, a.d});
  at::Tensor centroids = at::randn({a.k, a.d});
  at::Tensor centroids_t = centroids.t();
  const double s = TimeMedian(a.seconds, [&] { (void)at::mm(rows, centroids_t); });
  const double gflop = 2.0 * a.rows * a.d * a.k / 1e9;
  nlohmann::json j = {{"rows", a.rows},
                      {"d", a.d},
                      {"k", a.k},
                      {"threads", a.threads},
                      {"blas_threads", mlcd::BlasThreads()},
                      {"seconds_per_gemm", s},
                      {"gflops", gflop / s}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int RunNearestSplits(ShapeArgs a) {
  SetThreads(a.threads);
  a.rows = ChunkRowsOf(a);
  at::Tensor chunk = at::randn({a.rows, a.d});
  chunk.div_(chunk.norm(2, {1}, true));
  at::Tensor centroids = at::randn({a.k, a.d});
  centroids.div_(centroids.norm(2, {1}, true));
  at::Tensor centroids_t = centroids.t();
  at::Tensor sums = at::zeros({a.k, a.d}, at::kDouble);
  at::Tensor counts = at::zeros({a.k}, at::kDouble);
  at::Tensor scores = at::mm(chunk, centroids_t);
  auto [best, index] = at::max(scores, 1);
  nlohmann::json steps;
  auto step = [&](const char* name, const std::function<void()>& fn) {
    steps[name] = TimeMedian(a.seconds / 6, fn);
  };
  step("mm", [&] { scores = at::mm(chunk, centroids_t); });
  step("row_max", [&] { std::tie(best, index) = mlcd::worker::cluster::RowMax(scores); });
  step("aten_max", [&] { (void)at::max(scores, 1); });
  step("objective", [&] { (void)best.sum(at::kDouble); });
  step("rows_to_double", [&] { (void)chunk.to(at::kDouble); });
  at::Tensor chunk_d = chunk.to(at::kDouble);
  step("sums_index_add", [&] { sums.index_add_(0, index, chunk_d); });
  step("counts_index_add",
       [&] { counts.index_add_(0, index, at::ones({a.rows}, counts.options())); });
  double total = 0;
  for (const auto& [name, v] : steps.items())
    if (name != "aten_max") total += v.get<double>();  // not one of the engine's steps
  nlohmann::json j = {{"rows", a.rows},       {"d", a.d},         {"k", a.k},
                      {"threads", a.threads}, {"seconds", steps}, {"seconds_total", total}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

struct FaissArgs {
  std::vector<std::string> features;
  int k = 0, niter = 4, threads = 1, max_points_per_centroid = 256;
  uint64_t seed = 1234;
};

int RunFaissKMeans(const FaissArgs& a) {
  auto shards = mlcd::clusterd::FeatureShards::Open(a.features);
  if (!shards.ok()) {
    std::fprintf(stderr, "error: %s\n", shards.status().ToString().c_str());
    return 2;
  }
  mlcd::clusterd::SphericalKMeansParams p;
  p.k = a.k;
  p.niter = a.niter;
  p.seed = a.seed;
  p.max_points_per_centroid = a.max_points_per_centroid;
  p.threads = a.threads;
  auto km = mlcd::clusterd::TrainSphericalKMeans(*shards, p);
  if (!km.ok()) {
    std::fprintf(stderr, "error: %s\n", km.status().ToString().c_str());
    return km.status().code() == mlcd::StatusCode::kInvalidArgument ? 2 : 1;
  }
  nlohmann::json its = nlohmann::json::array();
  for (const auto& it : km->iterations)
    its.push_back(
        {{"iteration", it.iteration}, {"objective", it.objective}, {"seconds", it.seconds}});
  nlohmann::json j = {{"rows", km->num_points},
                      {"train_rows", km->num_train_points},
                      {"k", km->k},
                      {"d", km->d},
                      {"threads", a.threads},
                      {"read_seconds", km->read_seconds},
                      {"iterations", its}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

void AddShapeOptions(CLI::App* app, ShapeArgs* a) {
  app->add_option("--rows", a->rows, "rows of the chunk (default: the engine's chunk for k)");
  app->add_option("--workspace-mb", a->workspace_mb,
                  "the engine's search workspace (default: the engine's default)");
  app->add_option("--d", a->d, "feature dimension");
  app->add_option("--k", a->k, "centroids");
  app->add_option("--threads", a->threads, "ATen and OpenBLAS threads")->check(CLI::Range(1, 256));
  app->add_option("--seconds", a->seconds, "time budget of the measurement");
}

}  // namespace

int main(int argc, char** argv) {
  mlcd::SelectOpenblasCoretype(argc, argv);
  mlcd::KeepFreedMemoryForReuse();  // as mlcd-worker and mlcd-clusterd (common/malloc_env.h)
  CLI::App app{"probes of the gang k-means CPU benchmark", "gang_kmeans_probe"};
  app.require_subcommand(1);
  ShapeArgs sgemm, splits;
  FaissArgs faiss;
  CLI::App* sgemm_cmd = app.add_subcommand("sgemm", "sgemm ceiling of the search's GEMM shape");
  AddShapeOptions(sgemm_cmd, &sgemm);
  CLI::App* splits_cmd = app.add_subcommand("nearest-splits", "the search's steps, timed");
  AddShapeOptions(splits_cmd, &splits);
  CLI::App* faiss_cmd = app.add_subcommand("faiss-kmeans", "clusterd's FAISS k-means");
  faiss_cmd->add_option("--features", faiss.features, ".npy shards")->required();
  faiss_cmd->add_option("--k", faiss.k, "centroids")->required();
  faiss_cmd->add_option("--niter", faiss.niter, "iterations");
  faiss_cmd->add_option("--threads", faiss.threads, "OpenMP and OpenBLAS threads");
  faiss_cmd->add_option("--max-points-per-centroid", faiss.max_points_per_centroid,
                        "training sample cap per centroid");
  faiss_cmd->add_option("--seed", faiss.seed, "sample and initialisation seed");
  CLI11_PARSE(app, argc, argv);
  if (sgemm_cmd->parsed()) return RunSgemm(sgemm);
  if (splits_cmd->parsed()) return RunNearestSplits(splits);
  return RunFaissKMeans(faiss);
}
