// Clusterd benchmark: the whole clusterd path against bare FAISS on the same data.
//
//   bare FAISS:  faiss::Clustering (spherical, niter, max 256 points per centroid) on the
//                in-memory rows + IndexFlatIP top-l search of every row
//   clusterd:    the real mlcd-clusterd and mlcd-labelstore binaries: Cluster (read and scan
//                the shards, k-means, size pass, centroids written) then Assign (read shards,
//                exact top-l, label set streamed into the label store and sealed)
//
// Target: clusterd <= 1.15 x bare FAISS. Also prints the GFLOP/s of the assignment search
// against a plain sgemm of the same inner dimension measured in the same run.
//
//   build-*/bin/clusterd_bench [--rows 500000] [--dim 128] [--k 4096] [--l 8] [--niter 20]
//                              [--json bench/results/clusterd.json]
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "clusterd/client.h"
#include "clusterd/feature_gen.h"
#include "clusterd/feature_source.h"
#include "common/blas_env.h"
#include "common/file_util.h"
#include "common/net.h"
#include "common/npy.h"
#include "labelstore/client.h"
#include "tests/testing/process.h"

extern "C" int sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                      const float* beta, float* c, const int* ldc);

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

// Best of `reps` runs of C (m x n) = A (m x k) * B^T (B: n x k), row-major as FAISS lays it out.
double SgemmGflops(int m, int n, int k, int reps) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k), c(static_cast<size_t>(m) * n);
  for (auto& v : a) v = u(rng);
  for (auto& v : b) v = u(rng);
  float one = 1, zero = 0;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t = Clock::now();
    // Column-major view: C^T (n x m) = B (n x k as k x n col-major, transposed) * A^T.
    sgemm_("T", "N", &n, &m, &k, &one, b.data(), &k, a.data(), &k, &zero, c.data(), &n);
    double s = Since(t);
    best = std::max(best, 2.0 * m * n * k / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  mlcd::SelectOpenblasCoretype(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows up line by line in a log file
  CLI::App app{"mlcd-clusterd benchmark: whole clusterd path vs bare FAISS", "clusterd_bench"};
  int64_t rows = 500000;
  int dim = 128, k = 4096, l = 8, niter = 20, shards = 4, centres = 2000;
  std::string json_path = "bench/results/clusterd.json";
  std::string work_dir;
  app.add_option("--rows", rows, "feature rows")->capture_default_str();
  app.add_option("--dim", dim, "feature dimension")->capture_default_str();
  app.add_option("--k", k, "centroids")->capture_default_str();
  app.add_option("--l", l, "labels per sample")->capture_default_str();
  app.add_option("--niter", niter, "k-means iterations")->capture_default_str();
  app.add_option("--shards", shards, "feature shard files")->capture_default_str();
  app.add_option("--centres", centres, "mixture components of the synthetic data")->capture_default_str();
  app.add_option("--json", json_path, "where to write the JSON results")->capture_default_str();
  app.add_option("--work-dir", work_dir, "scratch directory (default: a fresh temp dir)");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<mlcd::testing::TempDir> tmp;
  if (work_dir.empty()) {
    tmp = std::make_unique<mlcd::testing::TempDir>();
    work_dir = tmp->path();
  }
  const std::string feats = work_dir + "/feats";
  std::printf("clusterd benchmark: %lld x %d float32 (%d shards), k = %d, l = %d, niter = %d, %u cores\n",
              static_cast<long long>(rows), dim, shards, k, l, niter, std::thread::hardware_concurrency());

  // Data (untimed).
  mlcd::clusterd::SyntheticMixtureOptions gen;
  gen.rows = rows;
  gen.dim = dim;
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
  std::printf("generated the data in %.1f s\n", Since(t_gen));

  // Services.
  const std::string bin = SelfDir();
  const std::string ls_addr = "127.0.0.1:" + std::to_string(mlcd::PickFreePort());
  const std::string cd_addr = "127.0.0.1:" + std::to_string(mlcd::PickFreePort());
  mlcd::testing::ChildProcess labelstore, clusterd;
  mlcd::Status st = labelstore.Start(bin + "/mlcd-labelstore",
                                     {"--listen", ls_addr, "--metrics-listen", "", "--data-dir", work_dir + "/ls"},
                                     work_dir + "/labelstore.log");
  if (st.ok()) {
    st = clusterd.Start(bin + "/mlcd-clusterd",
                        {"--listen", cd_addr, "--metrics-listen", "", "--data-dir", work_dir + "/cd", "--labelstore",
                         ls_addr},
                        work_dir + "/clusterd.log");
  }
  if (st.ok()) st = mlcd::testing::WaitForServing(ls_addr, std::chrono::seconds(60));
  if (st.ok()) st = mlcd::testing::WaitForServing(cd_addr, std::chrono::seconds(60));
  if (!st.ok()) {
    std::fprintf(stderr, "error: starting the services: %s\n", st.ToString().c_str());
    return 1;
  }

  // Whole clusterd path.
  mlcd::clusterd::ClusterdClient client(cd_addr);
  mlcd::v1::ClusterRequest creq;
  creq.mutable_features()->add_paths(feats);
  creq.set_k(k);
  creq.set_niter(niter);
  creq.set_seed(1234);
  creq.set_centroids_out(work_dir + "/centroids.npy");
  auto t_path = Clock::now();
  auto cluster = client.Cluster(creq, [](const mlcd::v1::ClusterProgress& p) {
    if (p.has_iteration())
      std::printf("  clusterd iteration %2d objective %.1f imbalance %.3f at %.1f s\n", p.iteration().iteration(),
                  p.iteration().objective(), p.iteration().imbalance_factor(), p.iteration().seconds());
  });
  if (!cluster.ok()) {
    std::fprintf(stderr, "error: Cluster: %s\n%s\n", cluster.status().ToString().c_str(), clusterd.Log().c_str());
    return 1;
  }
  double cluster_seconds = Since(t_path);
  mlcd::v1::AssignRequest areq;
  areq.mutable_features()->add_paths(feats);
  areq.set_centroids_path(work_dir + "/centroids.npy");
  areq.set_l(l);
  areq.set_label_set("bench/clusterd/r0");
  areq.set_replace_existing(true);
  auto t_assign = Clock::now();
  auto assign = client.Assign(areq);
  if (!assign.ok()) {
    std::fprintf(stderr, "error: Assign: %s\n%s\n", assign.status().ToString().c_str(), clusterd.Log().c_str());
    return 1;
  }
  double assign_seconds = Since(t_assign);
  double path_seconds = Since(t_path);
  mlcd::labelstore::LabelStoreClient store(ls_addr);
  auto info = store.Describe("bench/clusterd/r0");
  bool sealed = info.ok() && info->state() == mlcd::v1::LABEL_SET_STATE_SEALED &&
                info->num_samples() == static_cast<uint64_t>(rows);
  clusterd.Stop();
  labelstore.Stop();
  std::printf("clusterd path: %.2f s (Cluster %.2f s = read %.2f + k-means %.2f + sizes %.2f; Assign %.2f s, "
              "search %.2f s); label set sealed with %llu samples: %s\n",
              path_seconds, cluster_seconds, cluster->read_seconds(), cluster->train_seconds(),
              cluster->sizes_seconds(), assign_seconds, assign->search_seconds(),
              info.ok() ? static_cast<unsigned long long>(info->num_samples()) : 0ULL, sealed ? "yes" : "NO");

  // Bare FAISS on the same rows, already in memory (loading is not timed).
  auto shards_or = mlcd::clusterd::FeatureShards::Open({feats});
  if (!shards_or.ok()) return 1;
  std::vector<float> x(static_cast<size_t>(rows) * dim);
  shards_or->ReadRows(0, rows, x.data());
  faiss::ClusteringParameters cp;
  cp.niter = niter;
  cp.spherical = true;
  cp.seed = 1234;
  cp.max_points_per_centroid = 256;
  faiss::Clustering clustering(dim, k, cp);
  faiss::IndexFlatIP index(dim);
  auto t_bare = Clock::now();
  clustering.train(rows, x.data(), index);
  double bare_kmeans = Since(t_bare);
  std::vector<float> dist(static_cast<size_t>(rows) * l);
  std::vector<faiss::Index::idx_t> ids(static_cast<size_t>(rows) * l);
  auto t_search = Clock::now();
  index.search(rows, x.data(), l, dist.data(), ids.data());
  double bare_search = Since(t_search);
  double bare_seconds = bare_kmeans + bare_search;
  std::printf("bare FAISS: %.2f s (k-means %.2f s, search %.2f s)\n", bare_seconds, bare_kmeans, bare_search);

  // Same centroids? (clusterd drives FAISS iteration by iteration from the same seed.)
  auto centroids = mlcd::ReadNpyAsFloat32(work_dir + "/centroids.npy");
  double max_diff = 0;
  if (centroids.ok() && centroids->size() == clustering.centroids.size()) {
    for (size_t i = 0; i < centroids->size(); ++i)
      max_diff = std::max(max_diff, static_cast<double>(std::abs((*centroids)[i] - clustering.centroids[i])));
  }

  const double flops = 2.0 * static_cast<double>(rows) * k * dim;
  double sgemm = SgemmGflops(4096, std::min(k, 4096), dim, 5);
  double assign_gflops = flops / assign->search_seconds() / 1e9;
  double bare_gflops = flops / bare_search / 1e9;
  double ratio = path_seconds / bare_seconds;
  std::printf("assignment search: clusterd %.1f GFLOP/s, bare FAISS %.1f GFLOP/s; plain sgemm (4096 x %d x %d) "
              "%.1f GFLOP/s -> clusterd at %.0f%% of sgemm\n",
              assign_gflops, bare_gflops, std::min(k, 4096), dim, sgemm, 100 * assign_gflops / sgemm);
  std::printf("centroids max |clusterd - bare FAISS| = %.2e\n", max_diff);
  std::printf("RESULT whole clusterd path / bare FAISS = %.3f (target <= 1.15): %s\n", ratio,
              ratio <= 1.15 ? "met" : "NOT met");

  nlohmann::json j;
  j["rows"] = rows;
  j["dim"] = dim;
  j["k"] = k;
  j["l"] = l;
  j["niter"] = niter;
  j["shards"] = shards;
  j["cores"] = std::thread::hardware_concurrency();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  j["openblas_coretype"] = coretype ? coretype : "";
  j["bare_faiss"] = {{"total_seconds", bare_seconds}, {"kmeans_seconds", bare_kmeans}, {"search_seconds", bare_search},
                     {"search_gflops", bare_gflops}};
  j["clusterd"] = {{"total_seconds", path_seconds},
                   {"cluster_seconds", cluster_seconds},
                   {"cluster_read_seconds", cluster->read_seconds()},
                   {"cluster_train_seconds", cluster->train_seconds()},
                   {"cluster_sizes_seconds", cluster->sizes_seconds()},
                   {"assign_seconds", assign_seconds},
                   {"assign_search_seconds", assign->search_seconds()},
                   {"assign_search_gflops", assign_gflops},
                   {"label_set_sealed", sealed}};
  j["sgemm_gflops"] = sgemm;
  j["ratio"] = ratio;
  j["target_ratio"] = 1.15;
  j["target_met"] = ratio <= 1.15;
  j["centroids_max_abs_diff"] = max_diff;
  size_t slash = json_path.rfind('/');
  if (slash != std::string::npos) (void)mlcd::MakeDirs(json_path.substr(0, slash));
  std::ofstream(json_path) << j.dump(2) << "\n";
  std::printf("wrote %s\n", json_path.c_str());
  return sealed ? 0 : 1;
}
