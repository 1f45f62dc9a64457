// Clusterd benchmark: the whole clusterd path against bare FAISS on the same data.
//
//   bare FAISS:  faiss::Clustering (spherical, niter, max 256 points per centroid) on the
//                in-memory rows + IndexFlatIP top-l search of every row
//   clusterd:    the real mlcd-clusterd and mlcd-labelstore binaries: Cluster (read and scan
//                the shards, k-means, centroids written) then Assign (read shards, exact
//                top-l, label set streamed into the label store and sealed, cluster sizes),
//                as the coordinator runs them: Cluster with skip_size_pass, since Assign's
//                top-1 labels give the same size summary (--cluster-size-pass adds
//                Cluster's own pass, as a lone `mlcdctl cluster` does)
//
// Like for like: bare FAISS runs with the GEMM database block clusterd uses
// (ComputeScope::kDatabaseBlock centroids instead of FAISS's default 1024;
// --bare-faiss-default-block keeps FAISS's default). With --repeats N the two halves are
// interleaved N times (clusterd, bare, clusterd, bare, ...) so load changes hit both alike;
// every run is reported and the result is the median ratio.
//
// Target: clusterd <= 1.15 x bare FAISS. Also prints the GFLOP/s of the assignment search
// against a plain sgemm of the same inner dimension measured in the same run.
//
//   build-*/bin/clusterd_bench [--rows 500000] [--dim 128] [--k 4096] [--l 8] [--niter 20]
//                              [--repeats 1] [--bare-faiss-default-block] [--cluster-size-pass]
//                              [--json bench/results/clusterd.json]
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/utils/distances.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench/clusterd/bench_common.h"
#include "clients/clusterd_client.h"
#include "clients/labelstore_client.h"
#include "clusterd/compute_env.h"
#include "clusterd/feature_gen.h"
#include "clusterd/feature_source.h"
#include "common/blas_env.h"
#include "common/malloc_env.h"
#include "common/npy.h"

extern "C" int sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                      const int* k, const float* alpha, const float* a, const int* lda,
                      const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace {

using mlcd::SecondsSince;
using mlcd::bench::Clock;
using mlcd::bench::Median;

// Best of `reps` runs of C (m x n) = A (m x k) * B^T (B: n x k), row-major as FAISS lays it out.
double SgemmGflops(int m, int n, int k, int reps) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k),
      c(static_cast<size_t>(m) * n);
  for (auto& v : a) v = u(rng);
  for (auto& v : b) v = u(rng);
  float one = 1, zero = 0;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t = Clock::now();
    // Column-major view: C^T (n x m) = B (n x k as k x n col-major, transposed) * A^T.
    sgemm_("T", "N", &n, &m, &k, &one, b.data(), &k, a.data(), &k, &zero, c.data(), &n);
    double s = SecondsSince(t);
    best = std::max(best, 2.0 * m * n * k / s / 1e9);
  }
  return best;
}

struct Config {
  int64_t rows = 500000;
  int dim = 128, k = 4096, l = 8, niter = 20;
  // Run Cluster's own size pass too (the coordinator skips it).
  bool cluster_size_pass = false;
};

// One run of the whole clusterd path.
struct PathRun {
  double total = 0, cluster = 0, read = 0, train = 0, sizes = 0, assign = 0, search = 0;
  uint64_t samples = 0;
  bool sealed = false;
  std::string centroids_path;
};

// One run of bare FAISS.
struct BareRun {
  double total = 0, kmeans = 0, search = 0;
  std::vector<float> centroids;
};

mlcd::StatusOr<PathRun> RunClusterdPath(const mlcd::clusterd::ClusterdClient& client,
                                        const mlcd::labelstore::LabelStoreClient& store,
                                        const Config& cfg, const std::string& feats,
                                        const std::string& work_dir, int run) {
  PathRun r;
  r.centroids_path = work_dir + "/centroids-r" + std::to_string(run) + ".npy";
  mlcd::v1::ClusterRequest creq;
  creq.mutable_features()->add_paths(feats);
  creq.set_k(cfg.k);
  creq.set_niter(cfg.niter);
  creq.set_seed(1234);
  creq.set_centroids_out(r.centroids_path);
  creq.set_skip_size_pass(!cfg.cluster_size_pass);
  auto t_path = Clock::now();
  auto cluster = client.Cluster(creq, [](const mlcd::v1::ClusterProgress& p) {
    if (p.has_iteration())
      std::printf("  clusterd iteration %2d objective %.1f imbalance %.3f at %.1f s\n",
                  p.iteration().iteration(), p.iteration().objective(),
                  p.iteration().imbalance_factor(), p.iteration().seconds());
  });
  if (!cluster.ok()) return cluster.status().WithContext("Cluster");
  r.cluster = SecondsSince(t_path);
  r.read = cluster->read_seconds();
  r.train = cluster->train_seconds();
  r.sizes = cluster->sizes_seconds();
  // A fresh set per run, so no delete of an old one falls inside the timed Assign.
  const std::string label_set = "bench/clusterd/r" + std::to_string(run);
  mlcd::v1::AssignRequest areq;
  areq.mutable_features()->add_paths(feats);
  areq.set_centroids_path(r.centroids_path);
  areq.set_l(cfg.l);
  areq.set_label_set(label_set);
  areq.set_replace_existing(true);
  auto t_assign = Clock::now();
  auto assign = client.Assign(areq);
  if (!assign.ok()) return assign.status().WithContext("Assign");
  r.assign = SecondsSince(t_assign);
  r.total = SecondsSince(t_path);
  r.search = assign->search_seconds();
  r.sealed = mlcd::bench::SealedWith(store, label_set, cfg.rows, &r.samples);
  // The size summary must come out of the path one way or the other: its mean is rows / k.
  const auto& sizes = cfg.cluster_size_pass ? cluster->sizes() : assign->sizes();
  if (std::abs(sizes.mean() * cfg.k - static_cast<double>(cfg.rows)) > 0.5) {
    return mlcd::Status::Internal("cluster size summary missing or wrong: mean " +
                                  std::to_string(sizes.mean()) + " x k " + std::to_string(cfg.k) +
                                  " != rows " + std::to_string(cfg.rows));
  }
  return r;
}

BareRun RunBareFaiss(const Config& cfg, const std::vector<float>& x) {
  faiss::ClusteringParameters cp;
  cp.niter = cfg.niter;
  cp.spherical = true;
  cp.seed = 1234;
  cp.max_points_per_centroid = 256;
  faiss::Clustering clustering(cfg.dim, cfg.k, cp);
  faiss::IndexFlatIP index(cfg.dim);
  BareRun r;
  auto t_bare = Clock::now();
  clustering.train(cfg.rows, x.data(), index);
  r.kmeans = SecondsSince(t_bare);
  std::vector<float> dist(static_cast<size_t>(cfg.rows) * cfg.l);
  std::vector<faiss::Index::idx_t> ids(static_cast<size_t>(cfg.rows) * cfg.l);
  auto t_search = Clock::now();
  index.search(cfg.rows, x.data(), cfg.l, dist.data(), ids.data());
  r.search = SecondsSince(t_search);
  r.total = r.kmeans + r.search;
  r.centroids = std::move(clustering.centroids);
  return r;
}

// Max |a - b| over the centroids clusterd wrote and bare FAISS's (clusterd drives FAISS
// iteration by iteration from the same seed); -1 when they cannot be compared.
double CentroidsMaxDiff(const std::string& path, const std::vector<float>& bare) {
  auto centroids = mlcd::ReadNpyAsFloat32(path);
  if (!centroids.ok() || centroids->size() != bare.size()) return -1;
  double max_diff = 0;
  for (size_t i = 0; i < bare.size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::abs((*centroids)[i] - bare[i])));
  return max_diff;
}

}  // namespace

int main(int argc, char** argv) {
  mlcd::SelectOpenblasCoretype(argc, argv);
  mlcd::KeepFreedMemoryForReuse();           // common/malloc_env.h
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows up line by line in a log file
  CLI::App app{"mlcd-clusterd benchmark: whole clusterd path vs bare FAISS", "clusterd_bench"};
  Config cfg;
  int shards = 4, centres = 2000, repeats = 1;
  bool bare_default_block = false;
  std::string json_path = "bench/results/clusterd.json";
  std::string work_dir;
  app.add_option("--rows", cfg.rows, "feature rows")->capture_default_str();
  app.add_option("--dim", cfg.dim, "feature dimension")->capture_default_str();
  app.add_option("--k", cfg.k, "centroids")->capture_default_str();
  app.add_option("--l", cfg.l, "labels per sample")->capture_default_str();
  app.add_option("--niter", cfg.niter, "k-means iterations")->capture_default_str();
  app.add_option("--shards", shards, "feature shard files")->capture_default_str();
  app.add_option("--centres", centres, "mixture components of the synthetic data")
      ->capture_default_str();
  app.add_option("--repeats", repeats,
                 "interleaved runs of the two halves (clusterd, bare, clusterd, bare, ...); the "
                 "result is the "
                 "median ratio")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--bare-faiss-default-block", bare_default_block,
               "run bare FAISS with FAISS's default GEMM database block instead of clusterd's");
  app.add_flag(
      "--cluster-size-pass", cfg.cluster_size_pass,
      "also run Cluster's own size pass (the coordinator skips it; Assign reports the sizes)");
  app.add_option("--json", json_path, "where to write the JSON results")->capture_default_str();
  app.add_option("--work-dir", work_dir, "scratch directory (default: a fresh temp dir)");
  CLI11_PARSE(app, argc, argv);

  // FAISS's exhaustive search multiplies query blocks by blocks of this many database vectors;
  // clusterd's ComputeScope raises it to at least kDatabaseBlock for its jobs.
  const int faiss_default_block = faiss::distance_compute_blas_database_bs;
  const int clusterd_block =
      std::max(faiss_default_block, mlcd::clusterd::ComputeScope::kDatabaseBlock);
  const int bare_block = bare_default_block ? faiss_default_block : clusterd_block;
  faiss::distance_compute_blas_database_bs = bare_block;

  auto tmp = mlcd::bench::UseWorkDir(&work_dir);
  const std::string feats = work_dir + "/feats";
  std::printf(
      "clusterd benchmark: %lld x %d float32 (%d shards), k = %d, l = %d, niter = %d, %u cores, "
      "%d interleaved run(s); GEMM database block: clusterd %d, bare FAISS %d%s\n",
      static_cast<long long>(cfg.rows), cfg.dim, shards, cfg.k, cfg.l, cfg.niter,
      std::thread::hardware_concurrency(), repeats, clusterd_block, bare_block,
      bare_default_block ? " (FAISS default)" : " (same as clusterd)");

  // Data (untimed).
  mlcd::clusterd::SyntheticMixtureOptions gen;
  gen.rows = cfg.rows;
  gen.dim = cfg.dim;
  gen.num_centres = centres;
  gen.noise = 0.7;
  gen.seed = 42;
  gen.shards = shards;
  gen.out_dir = feats;
  auto t_gen = Clock::now();
  auto written = mlcd::clusterd::WriteSyntheticMixture(gen);
  if (!written.ok()) {
    std::fprintf(stderr, "error: %s\n", written.status().ToString().c_str());
    return 1;
  }
  // Bare FAISS works on the same rows already in memory (loading is not timed).
  auto shards_or = mlcd::clusterd::FeatureShards::Open({feats});
  if (!shards_or.ok()) {
    std::fprintf(stderr, "error: %s\n", shards_or.status().ToString().c_str());
    return 1;
  }
  std::vector<float> x(static_cast<size_t>(cfg.rows) * cfg.dim);
  shards_or->ReadRows(0, cfg.rows, x.data());
  std::printf("generated and loaded the data in %.1f s\n", SecondsSince(t_gen));

  mlcd::bench::BenchServices services;
  if (!services.Start(work_dir)) return 1;
  const mlcd::clusterd::ClusterdClient& client = *services.client;
  const mlcd::labelstore::LabelStoreClient& store = *services.store;

  std::vector<PathRun> path_runs;
  std::vector<BareRun> bare_runs;
  std::vector<double> ratios, diffs;
  for (int run = 0; run < repeats; ++run) {
    auto path = RunClusterdPath(client, store, cfg, feats, work_dir, run);
    if (!path.ok()) {
      std::fprintf(stderr, "error: %s\n%s\n", path.status().ToString().c_str(),
                   services.clusterd.Log().c_str());
      return 1;
    }
    std::printf(
        "run %d/%d clusterd path: %.2f s (Cluster %.2f s = read %.2f + k-means %.2f + sizes %.2f; "
        "Assign "
        "%.2f s, search %.2f s); label set sealed with %llu samples: %s\n",
        run + 1, repeats, path->total, path->cluster, path->read, path->train, path->sizes,
        path->assign, path->search, static_cast<unsigned long long>(path->samples),
        path->sealed ? "yes" : "NO");
    BareRun bare = RunBareFaiss(cfg, x);
    std::printf("run %d/%d bare FAISS: %.2f s (k-means %.2f s, search %.2f s)\n", run + 1, repeats,
                bare.total, bare.kmeans, bare.search);
    ratios.push_back(path->total / bare.total);
    diffs.push_back(CentroidsMaxDiff(path->centroids_path, bare.centroids));
    bare.centroids = {};
    path_runs.push_back(*path);
    bare_runs.push_back(std::move(bare));
  }
  services.Stop();

  // Per-field medians over the runs.
  auto path_median = [&](double PathRun::*field) {
    std::vector<double> v;
    for (const auto& r : path_runs) v.push_back(r.*field);
    return Median(v);
  };
  auto bare_median = [&](double BareRun::*field) {
    std::vector<double> v;
    for (const auto& r : bare_runs) v.push_back(r.*field);
    return Median(v);
  };
  bool all_sealed =
      std::all_of(path_runs.begin(), path_runs.end(), [](const PathRun& r) { return r.sealed; });
  const double flops = 2.0 * static_cast<double>(cfg.rows) * cfg.k * cfg.dim;
  const int sgemm_n = std::min(cfg.k, 4096);
  double sgemm = SgemmGflops(4096, sgemm_n, cfg.dim, 5);
  double assign_gflops = flops / path_median(&PathRun::search) / 1e9;
  double bare_gflops = flops / bare_median(&BareRun::search) / 1e9;
  double ratio = Median(ratios);
  double max_diff = *std::max_element(diffs.begin(), diffs.end());

  std::printf("\n%4s %12s %10s %10s %12s %10s %10s %8s\n", "run", "clusterd s", "Cluster s",
              "Assign s", "bare FAISS s", "k-means s", "search s", "ratio");
  for (int run = 0; run < repeats; ++run) {
    const PathRun& p = path_runs[static_cast<size_t>(run)];
    const BareRun& b = bare_runs[static_cast<size_t>(run)];
    std::printf("%4d %12.2f %10.2f %10.2f %12.2f %10.2f %10.2f %8.3f\n", run + 1, p.total,
                p.cluster, p.assign, b.total, b.kmeans, b.search, ratios[static_cast<size_t>(run)]);
  }
  std::printf("%4s %12.2f %10.2f %10.2f %12.2f %10.2f %10.2f %8.3f\n", "med",
              path_median(&PathRun::total), path_median(&PathRun::cluster),
              path_median(&PathRun::assign), bare_median(&BareRun::total),
              bare_median(&BareRun::kmeans), bare_median(&BareRun::search), ratio);
  std::printf(
      "assignment search (medians): clusterd %.1f GFLOP/s, bare FAISS %.1f GFLOP/s; plain sgemm "
      "(4096 x %d "
      "x %d) %.1f GFLOP/s -> clusterd at %.0f%% of sgemm\n",
      assign_gflops, bare_gflops, sgemm_n, cfg.dim, sgemm, 100 * assign_gflops / sgemm);
  std::printf("centroids max |clusterd - bare FAISS| = %.2e (worst run)\n", max_diff);
  std::printf(
      "RESULT whole clusterd path / bare FAISS = %.3f (median of %d, min %.3f, max %.3f; bare "
      "FAISS "
      "database block %d) (target <= 1.15): %s\n",
      ratio, repeats, *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()), bare_block,
      ratio <= 1.15 ? "met" : "NOT met");

  nlohmann::json j;
  j["rows"] = cfg.rows;
  j["dim"] = cfg.dim;
  j["k"] = cfg.k;
  j["l"] = cfg.l;
  j["niter"] = cfg.niter;
  j["shards"] = shards;
  mlcd::bench::AddMachineJson(&j);
  j["repeats"] = repeats;
  j["faiss_default_database_block"] = faiss_default_block;
  j["clusterd_database_block"] = clusterd_block;
  j["bare_faiss_database_block"] = bare_block;
  j["runs"] = nlohmann::json::array();
  for (int run = 0; run < repeats; ++run) {
    const PathRun& p = path_runs[static_cast<size_t>(run)];
    const BareRun& b = bare_runs[static_cast<size_t>(run)];
    j["runs"].push_back(
        {{"clusterd",
          {{"total_seconds", p.total},
           {"cluster_seconds", p.cluster},
           {"cluster_read_seconds", p.read},
           {"cluster_train_seconds", p.train},
           {"cluster_sizes_seconds", p.sizes},
           {"assign_seconds", p.assign},
           {"assign_search_seconds", p.search},
           {"label_set_sealed", p.sealed}}},
         {"bare_faiss",
          {{"total_seconds", b.total}, {"kmeans_seconds", b.kmeans}, {"search_seconds", b.search}}},
         {"ratio", ratios[static_cast<size_t>(run)]},
         {"centroids_max_abs_diff", diffs[static_cast<size_t>(run)]}});
  }
  // The summaries below are per-field medians over the runs.
  j["bare_faiss"] = {{"total_seconds", bare_median(&BareRun::total)},
                     {"kmeans_seconds", bare_median(&BareRun::kmeans)},
                     {"search_seconds", bare_median(&BareRun::search)},
                     {"search_gflops", bare_gflops}};
  j["clusterd"] = {{"total_seconds", path_median(&PathRun::total)},
                   {"cluster_seconds", path_median(&PathRun::cluster)},
                   {"cluster_read_seconds", path_median(&PathRun::read)},
                   {"cluster_train_seconds", path_median(&PathRun::train)},
                   {"cluster_sizes_seconds", path_median(&PathRun::sizes)},
                   {"assign_seconds", path_median(&PathRun::assign)},
                   {"assign_search_seconds", path_median(&PathRun::search)},
                   {"assign_search_gflops", assign_gflops},
                   {"label_set_sealed", all_sealed}};
  j["cluster_size_pass"] = cfg.cluster_size_pass;
  j["sgemm_gflops"] = sgemm;
  j["ratio"] = ratio;
  j["ratios"] = ratios;
  j["ratio_min"] = *std::min_element(ratios.begin(), ratios.end());
  j["ratio_max"] = *std::max_element(ratios.begin(), ratios.end());
  j["target_ratio"] = 1.15;
  j["target_met"] = ratio <= 1.15;
  j["centroids_max_abs_diff"] = max_diff;
  mlcd::bench::WriteJsonFile(json_path, j);
  std::printf("wrote %s\n", json_path.c_str());
  return all_sealed ? 0 : 1;
}
