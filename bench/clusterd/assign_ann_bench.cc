// Approximate top-l assignment at large k: exact vs HNSW vs IVF through the real service path.
//
// Data: k random unit centroids (d = 128) and n query rows, each a random centroid plus
// Gaussian noise, normalised (the synthetic mixture generator of mlcd-clusterd with k
// components, its centres written as the centroids .npy), so every query has a meaningful
// nearest centroid. Then, for each method, the real mlcd-clusterd (with mlcd-labelstore) runs
// an Assign of the queries against the centroids .npy into a label set, sealed.
//
// Reported per method: the Assign call's wall time, the time before the pass (index build +
// the service's own recall sample), the search time of the pass and rows/s, the recall@l
// against exact search the service reports on its sample, and the bench's own recall@l on an
// independent sample of rows read back from the sealed label set and compared with an exact
// IndexFlatIP search done in the bench process.
//
//   build-*/bin/assign_ann_bench [--k 200000] [--queries 100000] [--dim 128] [--l 8]
//                                [--methods exact,hnsw,ivf] [--json bench/results/clusterd_ann.json]
#include <faiss/IndexFlat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "bench/clusterd/bench_common.h"
#include "clients/clusterd_client.h"
#include "clients/labelstore_client.h"
#include "clusterd/feature_gen.h"
#include "clusterd/feature_source.h"
#include "common/blas_env.h"
#include "common/malloc_env.h"
#include "common/npy.h"

namespace {

using mlcd::SecondsSince;
using mlcd::bench::Clock;

// One entry of --methods: "exact", "hnsw", "ivf", optionally ":effort" (HNSW efSearch / IVF
// nprobe).
struct MethodSpec {
  std::string name;
  int effort = 0;  // 0 = the service's default
  mlcd::v1::SearchMethod proto = mlcd::v1::SEARCH_METHOD_EXACT;
  std::string label() const { return effort > 0 ? name + ":" + std::to_string(effort) : name; }
};

mlcd::StatusOr<std::vector<MethodSpec>> ParseMethods(const std::string& list) {
  std::vector<MethodSpec> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    MethodSpec m;
    size_t colon = item.find(':');
    m.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      try {
        m.effort = std::stoi(item.substr(colon + 1));
      } catch (const std::exception&) {
        m.effort = -1;
      }
      if (m.effort < 1)
        return mlcd::Status::InvalidArgument("--methods: bad effort in '" + item + "'");
    }
    if (m.name == "exact") {
      if (m.effort > 0)
        return mlcd::Status::InvalidArgument("--methods: exact takes no effort ('" + item + "')");
      m.proto = mlcd::v1::SEARCH_METHOD_EXACT;
    } else if (m.name == "hnsw") {
      m.proto = mlcd::v1::SEARCH_METHOD_HNSW;
    } else if (m.name == "ivf") {
      m.proto = mlcd::v1::SEARCH_METHOD_IVF;
    } else {
      return mlcd::Status::InvalidArgument("--methods: unknown method '" + m.name +
                                           "' (exact, hnsw, ivf)");
    }
    out.push_back(m);
  }
  if (out.empty()) return mlcd::Status::InvalidArgument("--methods is empty");
  return out;
}

// `count` distinct rows of [0, n), ascending.
std::vector<int64_t> SampleRows(int64_t n, int64_t count, uint64_t seed) {
  std::set<int64_t> picked;
  if (count >= n) {
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> u(0, n - 1);
  while (static_cast<int64_t>(picked.size()) < count) picked.insert(u(rng));
  return {picked.begin(), picked.end()};
}

struct MethodRun {
  MethodSpec spec;
  std::string label_set;
  double assign_seconds = 0;  // the Assign call, client side
  double server_seconds = 0;  // as the service reports it
  double prep_seconds = 0;    // index build + the service's recall sample (before the pass)
  double search_seconds = 0;  // FAISS searches of the pass
  double service_recall = 1;
  uint64_t service_recall_rows = 0;
  // The bench's check on its own sample, read back from the label set.
  double recall = 0, top1_agreement = 0, source_top1 = 0, source_in_topl = 0;
  uint64_t samples = 0;
  size_t missing = 0;
  bool sealed = false;
};

}  // namespace

int main(int argc, char** argv) {
  mlcd::SelectOpenblasCoretype(argc, argv);
  mlcd::KeepFreedMemoryForReuse();  // common/malloc_env.h
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{
      "mlcd-clusterd benchmark: exact vs approximate (HNSW, IVF) top-l assignment at large k",
      "assign_ann_bench"};
  int k = 200000, dim = 128, l = 8, shards = 1;
  int64_t queries = 100000, check_rows = 10000;
  int recall_sample = 10000;
  double noise = 0.5;
  uint64_t seed = 7;
  std::string methods_arg = "exact,hnsw,ivf";
  std::string json_path = "bench/results/clusterd_ann.json";
  std::string work_dir;
  app.add_option("--k", k, "centroids (random unit vectors)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--queries", queries, "query rows, each a random centroid + noise, normalised")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--dim", dim, "dimension")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--l", l, "labels per row")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option(
         "--noise", noise,
         "query = normalise(centroid + noise * g / sqrt(dim)); cosine to its centroid about "
         "1 / sqrt(1 + noise^2)")
      ->capture_default_str();
  app.add_option("--shards", shards, "query shard files")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option(
         "--methods", methods_arg,
         "comma-separated exact, hnsw, ivf, each optionally :EFFORT (HNSW efSearch / IVF nprobe; "
         "default: the service's), e.g. exact,hnsw,hnsw:256,ivf,ivf:64")
      ->capture_default_str();
  app.add_option("--recall-sample", recall_sample,
                 "rows the service samples to measure recall (AssignRequest)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--check-rows", check_rows,
                 "rows the bench reads back from each label set and checks against "
                 "its own exact search")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the data and of the check sample")->capture_default_str();
  app.add_option("--json", json_path, "where to write the JSON results")->capture_default_str();
  app.add_option("--work-dir", work_dir, "scratch directory (default: a fresh temp dir)");
  CLI11_PARSE(app, argc, argv);
  auto methods = ParseMethods(methods_arg);
  if (!methods.ok()) {
    std::fprintf(stderr, "error: %s\n", methods.status().ToString().c_str());
    return 2;
  }
  if (l > k) {
    std::fprintf(stderr, "error: --l %d is larger than --k %d\n", l, k);
    return 2;
  }

  auto tmp = mlcd::bench::UseWorkDir(&work_dir);
  std::printf(
      "assignment benchmark: k = %d random unit centroids, %lld queries (centroid + noise %.2f), d "
      "= %d, "
      "l = %d, methods %s, %u cores\n",
      k, static_cast<long long>(queries), noise, dim, l, methods_arg.c_str(),
      std::thread::hardware_concurrency());

  // Data (untimed): queries as shards, the mixture's centres as the centroids .npy, and each
  // query's source centroid.
  mlcd::clusterd::SyntheticMixtureOptions gen;
  gen.rows = queries;
  gen.dim = dim;
  gen.num_centres = k;
  gen.noise = noise;
  gen.seed = seed;
  gen.shards = shards;
  gen.out_dir = work_dir + "/queries";
  gen.centres_out = work_dir + "/centroids.npy";
  gen.labels_out = work_dir + "/queries-source.labels.npy";
  auto t_gen = Clock::now();
  auto written = mlcd::clusterd::WriteSyntheticMixture(gen);
  if (!written.ok()) {
    std::fprintf(stderr, "error: %s\n", written.status().ToString().c_str());
    return 1;
  }
  std::printf("generated the data in %.1f s\n", SecondsSince(t_gen));

  // The check sample and its exact top-l, in this process (untimed).
  auto t_truth = Clock::now();
  auto shards_or = mlcd::clusterd::FeatureShards::Open({gen.out_dir});
  auto centroids = mlcd::ReadNpyAsFloat32(gen.centres_out);
  auto sources = mlcd::ReadNpyAsInt64(gen.labels_out);
  if (!shards_or.ok() || !centroids.ok() || !sources.ok()) {
    std::fprintf(stderr, "error: reading the generated data back failed\n");
    return 1;
  }
  const std::vector<int64_t> sample = SampleRows(queries, check_rows, seed + 1);
  const size_t ns = sample.size();
  std::vector<float> sample_rows(ns * static_cast<size_t>(dim));
  shards_or->GatherRows(sample, sample_rows.data());
  std::vector<float> truth_scores(ns * static_cast<size_t>(l));
  std::vector<faiss::Index::idx_t> truth(ns * static_cast<size_t>(l));
  {
    faiss::IndexFlatIP exact(dim);
    exact.add(k, centroids->data());
    exact.search(static_cast<faiss::Index::idx_t>(ns), sample_rows.data(), l, truth_scores.data(),
                 truth.data());
  }
  centroids->clear();
  centroids->shrink_to_fit();
  double truth_seconds = SecondsSince(t_truth);
  std::printf("exact top-%d of the %zu check rows in the bench process: %.1f s\n", l, ns,
              truth_seconds);

  mlcd::bench::BenchServices services;
  if (!services.Start(work_dir)) return 1;
  const mlcd::clusterd::ClusterdClient& client = *services.client;
  const mlcd::labelstore::LabelStoreClient& store = *services.store;
  std::vector<uint64_t> sample_ids(sample.begin(), sample.end());  // sample id = global row

  std::vector<MethodRun> runs;
  for (const MethodSpec& spec : *methods) {
    MethodRun r;
    r.spec = spec;
    r.label_set =
        "bench/ann/" + spec.name + (spec.effort > 0 ? "-" + std::to_string(spec.effort) : "");
    mlcd::v1::AssignRequest req;
    req.mutable_features()->add_paths(gen.out_dir);
    req.set_centroids_path(gen.centres_out);
    req.set_l(l);
    req.set_label_set(r.label_set);
    req.set_replace_existing(true);
    req.set_method(spec.proto);
    req.set_search_effort(spec.effort);
    req.set_recall_sample(recall_sample);
    // The pass starts after the "assigning ..." note; approximate methods then build their
    // index and measure recall on the service's sample, which ends with the "recall@" note.
    Clock::time_point t_assigning{}, t_recall{};
    auto t0 = Clock::now();
    auto result = client.Assign(req, [&](const mlcd::v1::AssignProgress& p) {
      if (!p.has_note()) return;
      if (p.note().rfind("assigning ", 0) == 0) t_assigning = Clock::now();
      if (p.note().find("recall@") != std::string::npos) t_recall = Clock::now();
      std::printf("  [%s %.1f s] %s\n", spec.label().c_str(), SecondsSince(t0), p.note().c_str());
    });
    r.assign_seconds = SecondsSince(t0);
    if (!result.ok()) {
      std::fprintf(stderr, "error: Assign %s: %s\n%s\n", spec.label().c_str(),
                   result.status().ToString().c_str(), services.clusterd.Log().c_str());
      return 1;
    }
    r.server_seconds = result->seconds();
    r.search_seconds = result->search_seconds();
    r.service_recall = result->approx_recall();
    r.service_recall_rows = result->recall_rows();
    if (t_assigning != Clock::time_point{} && t_recall > t_assigning)
      r.prep_seconds = std::chrono::duration<double>(t_recall - t_assigning).count();
    r.sealed = mlcd::bench::SealedWith(store, r.label_set, queries, &r.samples);

    // Own check: read the sample's rows back from the sealed set.
    auto batch = store.GetLabels(r.label_set, sample_ids);
    if (!batch.ok()) {
      std::fprintf(stderr, "error: reading back %s: %s\n", r.label_set.c_str(),
                   batch.status().ToString().c_str());
      return 1;
    }
    r.missing = batch->missing_ids.size();
    int64_t hits = 0, top1 = 0, src1 = 0, srcl = 0;
    for (size_t i = 0; i < ns; ++i) {
      const int32_t* got = batch->row(i);
      const faiss::Index::idx_t* want = truth.data() + i * static_cast<size_t>(l);
      const int64_t src = (*sources)[static_cast<size_t>(sample[i])];
      for (int j = 0; j < l; ++j) hits += std::find(want, want + l, got[j]) != want + l;
      top1 += got[0] == want[0];
      src1 += got[0] == src;
      srcl += std::find(got, got + l, src) != got + l;
    }
    r.recall = static_cast<double>(hits) / (static_cast<double>(ns) * l);
    r.top1_agreement = static_cast<double>(top1) / static_cast<double>(ns);
    r.source_top1 = static_cast<double>(src1) / static_cast<double>(ns);
    r.source_in_topl = static_cast<double>(srcl) / static_cast<double>(ns);
    std::printf(
        "%s: Assign %.2f s (before the pass %.2f s, search %.2f s = %.0f rows/s); recall@%d: "
        "service %.4f "
        "on %llu rows, bench %.4f on %zu rows; sealed with %llu samples: %s\n",
        spec.label().c_str(), r.assign_seconds, r.prep_seconds, r.search_seconds,
        static_cast<double>(queries) / r.search_seconds, l, r.service_recall,
        static_cast<unsigned long long>(r.service_recall_rows), r.recall, ns,
        static_cast<unsigned long long>(r.samples), r.sealed ? "yes" : "NO");
    runs.push_back(r);
  }
  services.Stop();

  double exact_search = 0;
  for (const auto& r : runs)
    if (r.spec.name == "exact" && r.spec.effort == 0) exact_search = r.search_seconds;
  const double flops = 2.0 * static_cast<double>(queries) * k * dim;
  std::printf("\n%-10s %9s %9s %9s %11s %11s %8s %10s %10s %8s %8s\n", "method", "Assign s",
              "prep s", "search s", "rows/s srch", "rows/s all", "speedup", "svc recall",
              "recall@l", "top1=", "src@1");
  for (const auto& r : runs) {
    char speedup[32] = "-";
    if (exact_search > 0)
      std::snprintf(speedup, sizeof(speedup), "%.2fx", exact_search / r.search_seconds);
    std::printf("%-10s %9.2f %9.2f %9.2f %11.0f %11.0f %8s %10.4f %10.4f %8.4f %8.4f\n",
                r.spec.label().c_str(), r.assign_seconds, r.prep_seconds, r.search_seconds,
                static_cast<double>(queries) / r.search_seconds,
                static_cast<double>(queries) / r.assign_seconds, speedup, r.service_recall,
                r.recall, r.top1_agreement, r.source_top1);
  }
  std::printf(
      "prep = index build + the service's recall sample (%d rows searched both ways); speedup = "
      "exact "
      "search s / search s; svc recall = recall@%d the service reports; recall@l, top1= (top-1 "
      "equals "
      "exact) and src@1 (top-1 is the query's source centroid) from %zu rows read back from each "
      "label set\n",
      static_cast<int>(std::min<int64_t>(recall_sample, queries)), l, ns);
  if (exact_search > 0)
    std::printf("exact search: %.1f GFLOP/s (2 n k d / search s)\n", flops / exact_search / 1e9);

  bool ok = true;
  nlohmann::json j;
  j["k"] = k;
  j["dim"] = dim;
  j["queries"] = queries;
  j["l"] = l;
  j["noise"] = noise;
  j["shards"] = shards;
  j["seed"] = seed;
  mlcd::bench::AddMachineJson(&j);
  j["service_recall_sample"] = recall_sample;
  j["check_rows"] = ns;
  j["check_truth_seconds"] = truth_seconds;
  j["methods"] = nlohmann::json::array();
  for (const auto& r : runs) {
    ok = ok && r.sealed && r.missing == 0;
    nlohmann::json m = {{"method", r.spec.name},
                        {"search_effort", r.spec.effort},
                        {"label_set", r.label_set},
                        {"assign_seconds", r.assign_seconds},
                        {"server_seconds", r.server_seconds},
                        {"prep_seconds", r.prep_seconds},
                        {"search_seconds", r.search_seconds},
                        {"rows_per_second_search", static_cast<double>(queries) / r.search_seconds},
                        {"rows_per_second_assign", static_cast<double>(queries) / r.assign_seconds},
                        {"service_recall", r.service_recall},
                        {"service_recall_rows", r.service_recall_rows},
                        {"recall_at_l", r.recall},
                        {"top1_agreement", r.top1_agreement},
                        {"source_top1", r.source_top1},
                        {"source_in_top_l", r.source_in_topl},
                        {"missing_rows", r.missing},
                        {"label_set_samples", r.samples},
                        {"label_set_sealed", r.sealed}};
    if (exact_search > 0) m["speedup_vs_exact_search"] = exact_search / r.search_seconds;
    if (r.spec.name == "exact") m["search_gflops"] = flops / r.search_seconds / 1e9;
    j["methods"].push_back(m);
  }
  mlcd::bench::WriteJsonFile(json_path, j);
  std::printf("wrote %s\n", json_path.c_str());
  return ok ? 0 : 1;
}
