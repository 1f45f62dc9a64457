// The linear probe against math: finite-difference gradients of the objective, the L-BFGS
// solution against Newton's method written here, 100% on a separable problem, and the λ
// search on problems where over- (and under-) regularisation visibly hurt.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "worker/eval/linear_probe.h"

namespace mlcd::worker {
namespace {

// Rows x_i = centre[y_i] + noise·g, centres far apart: a problem with a known answer.
void MakeBlobs(int64_t n, int64_t d, int classes, double noise, uint64_t seed, FeatureMatrix* x,
               std::vector<int64_t>* y, std::vector<double> class_weights = {}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<std::vector<double>> centres(classes, std::vector<double>(d));
  std::mt19937_64 crng(1234);  // the same centres for every split
  for (auto& c : centres)
    for (auto& v : c) v = std::normal_distribution<double>(0, 1)(crng);
  if (class_weights.empty()) class_weights.assign(classes, 1.0);
  std::discrete_distribution<int> pick(class_weights.begin(), class_weights.end());
  *x = FeatureMatrix(n, d);
  y->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int c = pick(rng);
    (*y)[i] = c;
    for (int64_t j = 0; j < d; ++j)
      x->row(i)[j] = static_cast<float>(centres[c][j] + noise * g(rng));
  }
}

std::vector<double> Theta(const LogisticRegressionModel& m) {
  std::vector<double> t(m.weights);
  t.insert(t.end(), m.bias.begin(), m.bias.end());
  return t;
}

TEST(LogisticObjectiveTest, GradientMatchesFiniteDifferences) {
  FeatureMatrix x;
  std::vector<int64_t> y;
  MakeBlobs(40, 5, 3, 1.0, 7, &x, &y);
  const int K = 3;
  const double lambda = 2.5;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> g(0, 0.5);
  std::vector<double> theta(K * 6);
  for (double& v : theta) v = g(rng);
  std::vector<double> grad;
  double f = LogisticObjective(x, y, K, lambda, theta, &grad);
  EXPECT_TRUE(std::isfinite(f));
  ASSERT_EQ(grad.size(), theta.size());
  // Central differences; the objective is computed with float32 logits, so use a step that
  // keeps the rounding error (~1e-7 / h) well below the tolerance.
  const double h = 1e-3;
  for (size_t i = 0; i < theta.size(); ++i) {
    std::vector<double> tp = theta, tm = theta;
    tp[i] += h;
    tm[i] -= h;
    double fd = (LogisticObjective(x, y, K, lambda, tp, nullptr) -
                 LogisticObjective(x, y, K, lambda, tm, nullptr)) /
                (2 * h);
    EXPECT_NEAR(grad[i], fd, 2e-4 + 1e-3 * std::abs(fd)) << "parameter " << i;
  }
}

TEST(LogisticObjectiveTest, HandWorkedValue) {
  // One row x = (1, 0), label 0, two classes, W = [[1, 0], [0, 0]], b = 0, λ = 2:
  // logits (1, 0): CE = log(1 + e^-1); penalty λ/(2n)·||W||² = 2/2·1 = 1.
  FeatureMatrix x(1, 2);
  x.values = {1.0f, 0.0f};
  std::vector<int64_t> y = {0};
  std::vector<double> theta = {1, 0, 0, 0, 0, 0};
  double f = LogisticObjective(x, y, 2, 2.0, theta, nullptr);
  EXPECT_NEAR(f, std::log(1 + std::exp(-1.0)) + 1.0, 1e-6);
}

// Newton's method on F with an explicit Hessian (double precision, small problems only).
std::vector<double> NewtonSolve(const FeatureMatrix& x, const std::vector<int64_t>& y, int K,
                                double lambda) {
  const int64_t n = x.rows, d = x.cols, P = K * (d + 1);
  std::vector<double> theta(P, 0.0);
  auto feat = [&](int64_t i, int64_t j) { return j < d ? static_cast<double>(x.row(i)[j]) : 1.0; };
  for (int it = 0; it < 50; ++it) {
    std::vector<double> grad(P, 0.0), H(P * P, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> z(K, 0.0), p(K);
      for (int c = 0; c < K; ++c) {
        for (int64_t j = 0; j < d; ++j) z[c] += theta[c * d + j] * feat(i, j);
        z[c] += theta[K * d + c];
      }
      double m = *std::max_element(z.begin(), z.end()), s = 0;
      for (int c = 0; c < K; ++c) s += (p[c] = std::exp(z[c] - m));
      for (double& v : p) v /= s;
      auto index = [&](int c, int64_t j) { return j < d ? c * d + j : K * d + c; };
      for (int c = 0; c < K; ++c)
        for (int64_t j = 0; j <= d; ++j) grad[index(c, j)] += (p[c] - (y[i] == c)) * feat(i, j) / n;
      for (int a = 0; a < K; ++a)
        for (int b = 0; b < K; ++b) {
          double w = p[a] * ((a == b) - p[b]) / n;
          for (int64_t j = 0; j <= d; ++j)
            for (int64_t k = 0; k <= d; ++k)
              H[index(a, j) * P + index(b, k)] += w * feat(i, j) * feat(i, k);
        }
    }
    for (int64_t q = 0; q < K * d; ++q) {
      grad[q] += lambda / n * theta[q];
      H[q * P + q] += lambda / n;
    }
    // The softmax Hessian is singular along "add a constant to every class" for the bias;
    // a tiny ridge makes the solve well defined without moving the minimiser noticeably.
    for (int64_t q = 0; q < P; ++q) H[q * P + q] += 1e-12;
    // Solve H step = grad (Gaussian elimination with partial pivoting).
    std::vector<double> A = H, b = grad;
    for (int64_t c = 0; c < P; ++c) {
      int64_t piv = c;
      for (int64_t r = c + 1; r < P; ++r)
        if (std::abs(A[r * P + c]) > std::abs(A[piv * P + c])) piv = r;
      for (int64_t k = 0; k < P; ++k) std::swap(A[c * P + k], A[piv * P + k]);
      std::swap(b[c], b[piv]);
      for (int64_t r = c + 1; r < P; ++r) {
        double f = A[r * P + c] / A[c * P + c];
        for (int64_t k = c; k < P; ++k) A[r * P + k] -= f * A[c * P + k];
        b[r] -= f * b[c];
      }
    }
    std::vector<double> step(P);
    for (int64_t c = P - 1; c >= 0; --c) {
      double s = b[c];
      for (int64_t k = c + 1; k < P; ++k) s -= A[c * P + k] * step[k];
      step[c] = s / A[c * P + c];
    }
    double norm = 0;
    for (int64_t q = 0; q < P; ++q) {
      theta[q] -= step[q];
      norm = std::max(norm, std::abs(step[q]));
    }
    if (norm < 1e-12) break;
  }
  return theta;
}

TEST(FitLogisticRegressionTest, LbfgsReachesNewtonSolution) {
  FeatureMatrix x;
  std::vector<int64_t> y;
  // Overlapping classes: a finite, well-defined optimum.
  MakeBlobs(200, 4, 3, 2.0, 11, &x, &y);
  const double lambda = 0.5;
  LogisticRegressionOptions o;
  o.lambda = lambda;
  o.gradient_tolerance = 1e-7;
  o.function_tolerance = 0;  // stop on the gradient only
  auto fit = FitLogisticRegression(x, y, 3, o);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  std::vector<double> newton = NewtonSolve(x, y, 3, lambda);
  std::vector<double> lbfgs = Theta(*fit);
  // The bias is determined only up to a common constant (softmax is shift invariant in it
  // and it is not penalised): compare the weights and the bias differences.
  const int64_t d = x.cols, K = 3;
  double f_newton = LogisticObjective(x, y, 3, lambda, newton, nullptr);
  EXPECT_NEAR(fit->objective, f_newton, 1e-6);
  EXPECT_LE(fit->gradient_max, 1e-5);
  for (int64_t q = 0; q < K * d; ++q) EXPECT_NEAR(lbfgs[q], newton[q], 2e-3) << "weight " << q;
  for (int c = 1; c < K; ++c)
    EXPECT_NEAR(lbfgs[K * d + c] - lbfgs[K * d], newton[K * d + c] - newton[K * d], 2e-3)
        << "bias " << c;
  EXPECT_GT(fit->iterations, 0);
}

TEST(FitLogisticRegressionTest, WarmStartFromTheSolutionStopsAtOnce) {
  FeatureMatrix x;
  std::vector<int64_t> y;
  MakeBlobs(300, 6, 4, 1.5, 5, &x, &y);
  LogisticRegressionOptions o;
  o.lambda = 1.0;
  auto first = FitLogisticRegression(x, y, 4, o);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->converged) << first->stop_reason;
  auto again = FitLogisticRegression(x, y, 4, o, &*first);
  ASSERT_TRUE(again.ok());
  EXPECT_LE(again->iterations, 3);
  EXPECT_NEAR(again->objective, first->objective, 1e-7);
}

TEST(FitLogisticRegressionTest, RejectsBadInput) {
  FeatureMatrix x(2, 2);
  x.values = {1, 0, 0, 1};
  LogisticRegressionOptions o;
  EXPECT_EQ(FitLogisticRegression(x, {0, 3}, 2, o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FitLogisticRegression(x, {0}, 2, o).status().code(), StatusCode::kInvalidArgument);
  o.lambda = -1;
  EXPECT_EQ(FitLogisticRegression(x, {0, 1}, 2, o).status().code(), StatusCode::kInvalidArgument);
  LogisticRegressionModel wrong;
  wrong.num_classes = 3;
  wrong.dim = 2;
  o.lambda = 1;
  EXPECT_EQ(FitLogisticRegression(x, {0, 1}, 2, o, &wrong).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(LinearProbeTest, SeparableProblemReachesHundredPercent) {
  FeatureMatrix train, test;
  std::vector<int64_t> ytr, yte;
  MakeBlobs(600, 16, 5, 0.3, 1, &train, &ytr);
  MakeBlobs(300, 16, 5, 0.3, 2, &test, &yte);
  LinearProbeOptions o;
  auto r = RunLinearProbe(train, ytr, test, yte, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->test_accuracy, 1.0);
  EXPECT_EQ(r->train_accuracy, 1.0);
  EXPECT_EQ(r->num_classes, 5);
  EXPECT_EQ(r->train_samples + r->validation_samples, 600);
  EXPECT_EQ(r->validation_samples, 120);
  EXPECT_EQ(r->test_samples, 300);
  // CLIP's search: 7 coarse points, then at most two per halving (8, 4, 2, 1).
  EXPECT_GE(r->trials.size(), 7u);
  EXPECT_LE(r->trials.size(), 15u);
  std::vector<double> grid = LambdaGrid(o);
  ASSERT_EQ(grid.size(), 97u);
  EXPECT_NEAR(grid.front(), 1e-6, 1e-18);
  EXPECT_NEAR(grid.back(), 1e6, 1e-6);
  for (const LambdaTrial& t : r->trials) {
    bool on_grid = false;
    for (double g : grid) on_grid |= std::abs(std::log10(g) - std::log10(t.lambda)) < 1e-9;
    EXPECT_TRUE(on_grid) << t.lambda;
  }
}

TEST(LinearProbeTest, SearchAvoidsOverRegularisation) {
  // Imbalanced classes (70/20/10) with an unpenalised bias: a huge λ drives W to 0 and the
  // model predicts the majority class (~70%); a moderate λ separates the classes.
  FeatureMatrix train, test;
  std::vector<int64_t> ytr, yte;
  MakeBlobs(1000, 8, 3, 0.6, 21, &train, &ytr, {0.7, 0.2, 0.1});
  MakeBlobs(500, 8, 3, 0.6, 22, &test, &yte, {0.7, 0.2, 0.1});
  LinearProbeOptions o;
  auto r = RunLinearProbe(train, ytr, test, yte, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  double strongest_acc = -1, chosen_acc = -1;
  for (const LambdaTrial& t : r->trials) {
    if (std::abs(t.lambda - 1e6) < 1) strongest_acc = t.validation_accuracy;
    if (t.lambda == r->lambda) chosen_acc = t.validation_accuracy;
  }
  ASSERT_GE(strongest_acc, 0);
  EXPECT_LT(strongest_acc, 0.8);  // visibly hurt: about the majority share
  EXPECT_GT(chosen_acc, strongest_acc + 0.15);
  EXPECT_LT(r->lambda, 1e4);
  EXPECT_GT(r->test_accuracy, 0.95);
  // With the search's λ the probe is at least as good on test as with a λ of 1e5.
  LinearProbeOptions heavy = o;
  heavy.fixed_lambda = 1e5;
  auto h = RunLinearProbe(train, ytr, test, yte, heavy);
  ASSERT_TRUE(h.ok());
  EXPECT_GT(r->test_accuracy, h->test_accuracy + 0.1);
}

TEST(LinearProbeTest, BinarySearchFindsTheFullSweepsBest) {
  // Overlapping classes: validation accuracy as a function of λ has a plateau and falls off
  // at strong regularisation. CLIP's binary search (at most 15 fits) must land within two
  // validation samples of the best of the full 97-point sweep on the same split.
  FeatureMatrix train, test;
  std::vector<int64_t> ytr, yte;
  MakeBlobs(500, 10, 4, 1.6, 41, &train, &ytr, {0.4, 0.3, 0.2, 0.1});
  MakeBlobs(200, 10, 4, 1.6, 42, &test, &yte, {0.4, 0.3, 0.2, 0.1});
  LinearProbeOptions o;
  auto r = RunLinearProbe(train, ytr, test, yte, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  double best_sweep = 0, worst_sweep = 1;
  for (double lambda : LambdaGrid(o)) {
    LinearProbeOptions one = o;  // a one-point grid: same split, one fit
    one.lambda_min = one.lambda_max = lambda;
    auto s = RunLinearProbe(train, ytr, test, yte, one);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->trials.size(), 1u);
    best_sweep = std::max(best_sweep, s->trials[0].validation_accuracy);
    worst_sweep = std::min(worst_sweep, s->trials[0].validation_accuracy);
  }
  EXPECT_GT(best_sweep, worst_sweep + 0.1);  // λ matters on this problem
  EXPECT_GE(r->validation_accuracy, best_sweep - 2.0 / r->validation_samples);
  EXPECT_LE(r->trials.size(), 15u);
}

TEST(LinearProbeTest, RejectsMismatchedInputs) {
  FeatureMatrix a(4, 3), b(2, 2);
  LinearProbeOptions o;
  EXPECT_EQ(RunLinearProbe(a, {0, 1, 0, 1}, b, {0, 1}, o).status().code(),
            StatusCode::kInvalidArgument);
  FeatureMatrix c(2, 3);
  EXPECT_EQ(RunLinearProbe(a, {0, 1, 0}, c, {0, 1}, o).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RunLinearProbe(a, {0, 1, 0, -1}, c, {0, 1}, o).status().code(),
            StatusCode::kInvalidArgument);
  o.validation_fraction = 1.5;
  EXPECT_EQ(RunLinearProbe(a, {0, 1, 0, 1}, c, {0, 1}, o).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RunLinearProbe(FeatureMatrix(), {}, c, {0, 1}, LinearProbeOptions()).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd::worker
