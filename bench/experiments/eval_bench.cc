// Speed of the evaluation library on realistic sizes (default: Fashion-MNIST-sized, 60000 train
// x 512 and 10000 test rows): one objective/gradient evaluation of the probe, the whole linear
// probe (CLIP's λ search + refit) at given solver tolerances, and kNN (k 20).
//
//   eval_bench --train-features tr.npy --test-features te.npy [--threads 2] [--out bench/results/eval_bench.json]
//   eval_bench --synthetic --rows 60000 --dim 512           (a Gaussian mixture, 10 classes)
//
// Features come with <file>.labels.npy beside them (mlcd-clusterd features --labels-out writes
// them; so does mlcd-worker embed).
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <random>

#include "common/blas_env.h"
#include "common/file_util.h"
#include "common/malloc_env.h"
#include "worker/eval/features.h"
#include "worker/eval/knn.h"
#include "worker/eval/linear_probe.h"

using namespace mlcd;
using namespace mlcd::worker;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Synthetic(int64_t n, int64_t d, uint64_t seed, LabelledFeatures* out) {
  std::mt19937_64 crng(99), rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> centres(10 * d);
  for (float& v : centres) v = g(crng) * 0.15f;
  out->features = FeatureMatrix(n, d);
  out->labels.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int c = static_cast<int>(rng() % 10);
    out->labels[i] = c;
    for (int64_t j = 0; j < d; ++j)
      out->features.row(i)[j] = centres[c * d + j] + g(rng) / std::sqrt(float(d));
  }
  L2NormalizeRows(&out->features);
}

}  // namespace

int main(int argc, char** argv) {
  SelectOpenblasCoretype(argc, argv);
  KeepFreedMemoryForReuse();  // common/malloc_env.h
  CLI::App app{"eval_bench: speed of the linear probe and kNN"};
  std::string train_path, test_path, out_path;
  bool synthetic = false;
  int64_t rows = 60000, test_rows = 10000, dim = 512;
  int threads = 2, max_iterations = 1000;
  std::vector<double> tolerances = {1e-4, 1e-6};
  app.add_option("--train-features", train_path);
  app.add_option("--test-features", test_path);
  app.add_flag("--synthetic", synthetic);
  app.add_option("--rows", rows)->capture_default_str();
  app.add_option("--test-rows", test_rows)->capture_default_str();
  app.add_option("--dim", dim)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--max-iterations", max_iterations)->capture_default_str();
  app.add_option("--gradient-tolerances", tolerances, "one probe run per value")
      ->capture_default_str();
  app.add_option("--out", out_path, "write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads);

  LabelledFeatures train, test;
  std::string source;
  if (synthetic || train_path.empty()) {
    Synthetic(rows, dim, 1, &train);
    Synthetic(test_rows, dim, 2, &test);
    source = "synthetic 10-class Gaussian mixture";
  } else {
    auto tr = LoadLabelledFeatures({train_path});
    auto te = LoadLabelledFeatures({test_path});
    if (!tr.ok() || !te.ok()) {
      std::fprintf(stderr, "%s\n", (tr.ok() ? te.status() : tr.status()).ToString().c_str());
      return 1;
    }
    train = std::move(*tr);
    test = std::move(*te);
    L2NormalizeRows(&train.features);
    L2NormalizeRows(&test.features);
    source = train_path;
  }
  const int K = NumClassesOf(train.labels);
  nlohmann::json j = {{"source", source},
                      {"train_rows", train.features.rows},
                      {"test_rows", test.features.rows},
                      {"dim", train.features.cols},
                      {"classes", K},
                      {"threads", threads}};
  std::printf("%s: %lld train x %lld, %lld test, %d classes, %d threads\n", source.c_str(),
              (long long)train.features.rows, (long long)train.features.cols,
              (long long)test.features.rows, K, threads);

  // One objective + gradient evaluation (what every L-BFGS step costs).
  std::vector<double> theta(K * (train.features.cols + 1), 0.01), grad;
  LogisticObjective(train.features, train.labels, K, 1.0, theta, &grad);  // warm-up
  const int reps = 10;
  double t0 = Now();
  for (int i = 0; i < reps; ++i)
    LogisticObjective(train.features, train.labels, K, 1.0, theta, &grad);
  double eval_ms = (Now() - t0) / reps * 1e3;
  std::printf("objective + gradient: %.1f ms per evaluation\n", eval_ms);
  j["objective_gradient_ms"] = eval_ms;

  nlohmann::json probes = nlohmann::json::array();
  for (double tol : tolerances) {
    LinearProbeOptions o;
    o.solver.gradient_tolerance = tol;
    o.solver.max_iterations = max_iterations;
    auto r = RunLinearProbe(train.features, train.labels, test.features, test.labels, o);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    int iterations = 0, capped = 0;
    for (const auto& t : r->trials) {
      iterations += t.iterations;
      capped += !t.converged;
    }
    std::printf(
        "linear probe (gradient tolerance %g): %.2f%% test at lambda %g; %zu fits, %d L-BFGS "
        "iterations "
        "(%d fits hit the cap), final fit %d iterations (%s); %.1f s (search %.1f s, final %.1f "
        "s)\n",
        tol, 100 * r->test_accuracy, r->lambda, r->trials.size(), iterations, capped,
        r->model.iterations, r->model.stop_reason.c_str(), r->seconds, r->search_seconds,
        r->final_fit_seconds);
    probes.push_back({{"gradient_tolerance", tol},
                      {"max_iterations", max_iterations},
                      {"test_accuracy", r->test_accuracy},
                      {"lambda", r->lambda},
                      {"fits", r->trials.size()},
                      {"iterations", iterations},
                      {"fits_at_cap", capped},
                      {"final_iterations", r->model.iterations},
                      {"final_objective", r->model.objective},
                      {"final_gradient_max", r->model.gradient_max},
                      {"seconds", r->seconds},
                      {"search_seconds", r->search_seconds},
                      {"final_fit_seconds", r->final_fit_seconds}});
  }
  j["linear_probe"] = probes;

  KnnOptions ko;
  auto k = KnnClassify(train.features, train.labels, test.features, test.labels, ko);
  if (!k.ok()) {
    std::fprintf(stderr, "%s\n", k.status().ToString().c_str());
    return 1;
  }
  double gflop = 2.0 * train.features.rows * test.features.rows * train.features.cols / 1e9;
  std::printf(
      "kNN (k 20, T 0.07): %.2f%% in %.2f s (%.0f GFLOP/s in the similarity GEMMs' share)\n",
      100 * k->accuracy, k->seconds, gflop / k->seconds);
  j["knn"] = {{"accuracy", k->accuracy}, {"seconds", k->seconds}, {"gflop", gflop}};
  if (!out_path.empty()) {
    Status s = WriteFileAtomically(out_path, j.dump(2) + "\n");
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
