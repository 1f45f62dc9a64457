#include "worker/eval/linear_probe.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include "common/stopwatch.h"
#include "worker/eval/kernels.h"

namespace mlcd::worker {
namespace {

using Clock = std::chrono::steady_clock;

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double MaxAbs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

// W and b of theta = [W, b] as float.
void SplitTheta(const double* theta, int num_classes, int64_t dim, std::vector<float>* w,
                std::vector<float>* b) {
  w->resize(static_cast<size_t>(num_classes * dim));
  b->resize(static_cast<size_t>(num_classes));
  for (int64_t i = 0; i < num_classes * dim; ++i) (*w)[i] = static_cast<float>(theta[i]);
  for (int c = 0; c < num_classes; ++c) (*b)[c] = static_cast<float>(theta[num_classes * dim + c]);
}

// Row ranges the objective is split into: a fixed number for a given n (not the thread
// count), so results do not depend on how many threads run them.
int64_t NumChunks(int64_t n) { return std::clamp<int64_t>(n / 2048, 1, 64); }

// Logits [n, K] of the rows of x.
std::vector<float> Logits(const FeatureMatrix& x, int num_classes, const double* theta) {
  std::vector<float> w, b;
  SplitTheta(theta, num_classes, x.cols, &w, &b);
  std::vector<float> z(static_cast<size_t>(x.rows * num_classes));
  const int64_t chunks = NumChunks(x.rows);
  kernels::ParallelFor(chunks, at::get_num_threads(), [&](int64_t ch) {
    const int64_t begin = x.rows * ch / chunks, end = x.rows * (ch + 1) / chunks;
    kernels::LogitsRows(x.values.data(), x.cols, begin, end, w.data(), b.data(), num_classes,
                        z.data() + begin * num_classes);
  });
  return z;
}

// The objective of one problem: F(theta) = mean CE + lambda/(2n) ||W||^2 and its gradient.
struct Problem {
  const FeatureMatrix* x = nullptr;
  const std::vector<int64_t>* labels = nullptr;
  int num_classes = 0;
  int64_t n = 0;
  int64_t d = 0;
  double lambda = 0;

  // Penalty weight of each input dimension (empty = all 1): the penalty is
  // lambda/(2n) Σ_cj penalty_weight[j] W_cj² (the fit in standardised coordinates uses
  // 1/σ_j² so that it is the plain penalty on the original weights).
  std::vector<double> penalty_weight;

  size_t size() const { return static_cast<size_t>(num_classes * (d + 1)); }

  double Evaluate(const std::vector<double>& theta, std::vector<double>* grad) const {
    const int K = num_classes;
    std::vector<float> w, b;
    SplitTheta(theta.data(), K, d, &w, &b);
    const double inv_n = 1.0 / static_cast<double>(n);
    const int64_t chunks = NumChunks(n);
    std::vector<double> losses(static_cast<size_t>(chunks), 0.0);
    std::vector<std::vector<double>> grads(grad ? static_cast<size_t>(chunks) : 0);
    kernels::ParallelFor(chunks, at::get_num_threads(), [&](int64_t ch) {
      const int64_t begin = n * ch / chunks, end = n * (ch + 1) / chunks;
      double* gw = nullptr;
      double* gb = nullptr;
      if (grad) {
        grads[ch].assign(size(), 0.0);
        gw = grads[ch].data();
        gb = gw + K * d;
      }
      losses[ch] = kernels::LogisticLossGradRows(x->values.data(), d, labels->data(), begin, end,
                                                 w.data(), b.data(), K, inv_n, gw, gb);
    });
    double ce_sum = 0;
    for (double l : losses) ce_sum += l;
    const bool weighted = !penalty_weight.empty();
    double w2 = 0;
    for (int64_t i = 0; i < K * d; ++i)
      w2 += theta[i] * theta[i] * (weighted ? penalty_weight[i % d] : 1.0);
    const double reg = lambda * inv_n;
    if (grad) {
      grad->assign(size(), 0.0);
      for (const auto& g : grads)
        for (size_t i = 0; i < g.size(); ++i) (*grad)[i] += g[i];
      for (int64_t i = 0; i < K * d; ++i)
        (*grad)[i] += reg * theta[i] * (weighted ? penalty_weight[i % d] : 1.0);
    }
    return ce_sum * inv_n + 0.5 * reg * w2;
  }
};

// A point on the search line.
struct LinePoint {
  double alpha = 0;
  double f = 0;
  double slope = 0;  // directional derivative g . direction
  std::vector<double> theta;
  std::vector<double> grad;
};

class LineSearch {
 public:
  LineSearch(const Problem& problem, const LogisticRegressionOptions& options,
             const std::vector<double>& theta, const std::vector<double>& direction, double f0,
             double slope0, int* evaluations)
      : problem_(problem),
        options_(options),
        theta_(theta),
        direction_(direction),
        f0_(f0),
        slope0_(slope0),
        evaluations_(evaluations) {}

  // Strong Wolfe line search (Nocedal & Wright, algorithms 3.5 and 3.6). Returns false when
  // no point with a lower objective was found; otherwise `*out` is the accepted point (a
  // Wolfe point, or the best lower point seen when the step budget ran out).
  bool Run(double alpha_init, LinePoint* out) {
    LinePoint prev;
    prev.alpha = 0;
    prev.f = f0_;
    prev.slope = slope0_;
    prev.theta = theta_;
    double alpha = alpha_init;
    for (int i = 0; i < options_.max_line_search_steps; ++i) {
      LinePoint cur = Evaluate(alpha);
      if (!(cur.f <= f0_ + kC1 * alpha * slope0_) || (i > 0 && cur.f >= prev.f))
        return Zoom(prev, cur, out);
      if (std::abs(cur.slope) <= -kC2 * slope0_) {
        *out = std::move(cur);
        return true;
      }
      if (cur.slope >= 0) return Zoom(cur, prev, out);
      prev = std::move(cur);
      alpha *= 2;
    }
    return Best(out);
  }

 private:
  static constexpr double kC1 = 1e-4;
  static constexpr double kC2 = 0.9;

  LinePoint Evaluate(double alpha) {
    LinePoint p;
    p.alpha = alpha;
    p.theta.resize(theta_.size());
    for (size_t i = 0; i < theta_.size(); ++i) p.theta[i] = theta_[i] + alpha * direction_[i];
    p.f = problem_.Evaluate(p.theta, &p.grad);
    p.slope = Dot(p.grad, direction_);
    ++*evaluations_;
    ++steps_;
    if (std::isfinite(p.f) && p.f < f0_ && (!best_ || p.f < best_->f))
      best_ = std::make_unique<LinePoint>(p);
    return p;
  }

  bool Zoom(LinePoint lo, LinePoint hi, LinePoint* out) {
    while (steps_ < 2 * options_.max_line_search_steps) {
      double a = Interpolate(lo, hi);
      if (std::abs(hi.alpha - lo.alpha) <= 1e-15 * std::max(1.0, std::abs(lo.alpha))) break;
      LinePoint cur = Evaluate(a);
      if (!(cur.f <= f0_ + kC1 * a * slope0_) || cur.f >= lo.f) {
        hi = std::move(cur);
      } else {
        if (std::abs(cur.slope) <= -kC2 * slope0_) {
          *out = std::move(cur);
          return true;
        }
        if (cur.slope * (hi.alpha - lo.alpha) >= 0) hi = lo;
        lo = std::move(cur);
      }
    }
    return Best(out);
  }

  // Minimiser of the cubic through (f, slope) at both ends, kept inside the middle 80% of
  // the interval; bisection when the cubic is not usable.
  static double Interpolate(const LinePoint& a, const LinePoint& b) {
    double lo = std::min(a.alpha, b.alpha), hi = std::max(a.alpha, b.alpha);
    double width = hi - lo;
    double d1 = a.slope + b.slope - 3 * (a.f - b.f) / (a.alpha - b.alpha);
    double disc = d1 * d1 - a.slope * b.slope;
    double t = std::numeric_limits<double>::quiet_NaN();
    if (disc >= 0 && std::isfinite(disc) && std::isfinite(b.f)) {
      double d2 = (b.alpha > a.alpha ? 1 : -1) * std::sqrt(disc);
      double denom = b.slope - a.slope + 2 * d2;
      if (denom != 0) t = b.alpha - (b.alpha - a.alpha) * (b.slope + d2 - d1) / denom;
    }
    if (!std::isfinite(t) || t < lo + 0.1 * width || t > hi - 0.1 * width) t = 0.5 * (lo + hi);
    return t;
  }

  bool Best(LinePoint* out) {
    if (!best_) return false;
    *out = std::move(*best_);
    return true;
  }

  const Problem& problem_;
  const LogisticRegressionOptions& options_;
  const std::vector<double>& theta_;
  const std::vector<double>& direction_;
  double f0_;
  double slope0_;
  int* evaluations_;
  int steps_ = 0;
  std::unique_ptr<LinePoint> best_;
};

Status CheckLabels(const std::vector<int64_t>& labels, int64_t rows, int num_classes,
                   const char* what) {
  if (static_cast<int64_t>(labels.size()) != rows)
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(labels.size()) +
                                   " labels for " + std::to_string(rows) + " feature rows");
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes)
      return Status::InvalidArgument(std::string(what) + ": label " + std::to_string(labels[i]) +
                                     " of row " + std::to_string(i) + " is outside [0, " +
                                     std::to_string(num_classes) + ")");
  }
  return Status::Ok();
}

Status CheckMatrix(const FeatureMatrix& m, const char* what) {
  if (m.rows <= 0 || m.cols <= 0)
    return Status::InvalidArgument(std::string(what) + ": empty feature matrix (" +
                                   std::to_string(m.rows) + " x " + std::to_string(m.cols) + ")");
  if (static_cast<int64_t>(m.values.size()) != m.rows * m.cols)
    return Status::InvalidArgument(std::string(what) + ": matrix holds " +
                                   std::to_string(m.values.size()) +
                                   " values, not rows x cols = " + std::to_string(m.rows * m.cols));
  return Status::Ok();
}

FeatureMatrix SelectRows(const FeatureMatrix& m, const std::vector<int64_t>& rows) {
  FeatureMatrix out(static_cast<int64_t>(rows.size()), m.cols);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy(m.row(rows[i]), m.row(rows[i]) + m.cols, out.row(static_cast<int64_t>(i)));
  return out;
}

// The checks of FitLogisticRegression's input (INVALID_ARGUMENT naming the problem).
Status CheckFitInput(const FeatureMatrix& x, const std::vector<int64_t>& labels, int num_classes,
                     const LogisticRegressionOptions& options,
                     const LogisticRegressionModel* warm_start) {
  MLCD_RETURN_IF_ERROR(CheckMatrix(x, "logistic regression"));
  if (num_classes < 1)
    return Status::InvalidArgument("logistic regression: num_classes must be >= 1");
  MLCD_RETURN_IF_ERROR(CheckLabels(labels, x.rows, num_classes, "logistic regression"));
  if (!(options.lambda >= 0) || !std::isfinite(options.lambda))
    return Status::InvalidArgument("logistic regression: lambda must be a finite value >= 0, got " +
                                   std::to_string(options.lambda));
  if (options.max_iterations < 0 || options.history < 1 || options.max_line_search_steps < 1)
    return Status::InvalidArgument(
        "logistic regression: max_iterations must be >= 0, history and max_line_search_steps >= 1");

  const int64_t K = num_classes, d = x.cols;
  if (warm_start && (warm_start->num_classes != num_classes || warm_start->dim != d ||
                     static_cast<int64_t>(warm_start->weights.size()) != K * d ||
                     static_cast<int64_t>(warm_start->bias.size()) != K))
    return Status::InvalidArgument("logistic regression: warm start has " +
                                   std::to_string(warm_start->num_classes) + " classes x " +
                                   std::to_string(warm_start->dim) + " dims, the problem " +
                                   std::to_string(num_classes) + " x " + std::to_string(d));
  return Status::Ok();
}

// Column means and standard deviations of x (a (nearly) constant column gets the largest
// deviation, or 1) and x standardised with them: x' = (x − μ)/σ.
void Standardize(const FeatureMatrix& x, std::vector<double>* mu_out,
                 std::vector<double>* sigma_out, FeatureMatrix* standardized_out) {
  const int64_t d = x.cols;
  std::vector<double>& mu = *mu_out;
  std::vector<double>& sigma = *sigma_out;
  FeatureMatrix& standardized = *standardized_out;
  std::vector<double> sq(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < d; ++j) mu[j] += x.row(i)[j];
  for (double& m : mu) m /= static_cast<double>(x.rows);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < d; ++j) {
      double c = x.row(i)[j] - mu[j];
      sq[j] += c * c;
    }
  double max_sigma = 0;
  for (int64_t j = 0; j < d; ++j)
    max_sigma = std::max(max_sigma, sigma[j] = std::sqrt(sq[j] / x.rows));
  for (int64_t j = 0; j < d; ++j)
    if (!(sigma[j] > 1e-6 * max_sigma))
      sigma[j] = max_sigma > 0 ? max_sigma : 1.0;  // (nearly) constant column
  standardized = FeatureMatrix(x.rows, d);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < d; ++j)
      standardized.row(i)[j] = static_cast<float>((x.row(i)[j] - mu[j]) / sigma[j]);
}

// L-BFGS from *theta (gradient *grad, objective *f at it) until a tolerance or the iteration
// limit; leaves the minimiser in *theta, *grad, *f and the run's record in *model
// (evaluations counted on).
void MinimizeLbfgs(const Problem& problem, const LogisticRegressionOptions& options,
                   std::vector<double>* theta_io, std::vector<double>* grad_io, double* f_io,
                   LogisticRegressionModel* model_io) {
  std::vector<double>& theta = *theta_io;
  std::vector<double>& grad = *grad_io;
  double& f = *f_io;
  LogisticRegressionModel& model = *model_io;
  struct Pair {
    std::vector<double> s, y;
    double rho;
  };
  std::deque<Pair> history;
  std::vector<double> dir(theta.size()), alpha_buf;
  int iter = 0;
  std::string stop = "iteration limit";
  bool converged = false;
  bool retried = false;
  while (true) {
    if (MaxAbs(grad) <= options.gradient_tolerance) {
      stop = "gradient tolerance";
      converged = true;
      break;
    }
    if (iter >= options.max_iterations) break;
    // Two-loop recursion: dir = -H grad.
    for (size_t i = 0; i < dir.size(); ++i) dir[i] = -grad[i];
    alpha_buf.assign(history.size(), 0.0);
    for (int j = static_cast<int>(history.size()) - 1; j >= 0; --j) {
      alpha_buf[j] = history[j].rho * Dot(history[j].s, dir);
      for (size_t i = 0; i < dir.size(); ++i) dir[i] -= alpha_buf[j] * history[j].y[i];
    }
    if (!history.empty()) {
      const Pair& last = history.back();
      double gamma = Dot(last.s, last.y) / Dot(last.y, last.y);
      for (double& v : dir) v *= gamma;
    }
    for (size_t j = 0; j < history.size(); ++j) {
      double beta = history[j].rho * Dot(history[j].y, dir);
      for (size_t i = 0; i < dir.size(); ++i) dir[i] += (alpha_buf[j] - beta) * history[j].s[i];
    }
    double slope = Dot(grad, dir);
    if (!(slope <
          0)) {  // not a descent direction (numerical trouble): restart from steepest descent
      history.clear();
      for (size_t i = 0; i < dir.size(); ++i) dir[i] = -grad[i];
      slope = -Dot(grad, grad);
    }
    double alpha_init = 1.0;
    if (history.empty()) alpha_init = std::min(1.0, 1.0 / std::sqrt(Dot(grad, grad)));
    LinePoint next;
    LineSearch search(problem, options, theta, dir, f, slope, &model.evaluations);
    if (!search.Run(alpha_init, &next)) {
      if (!history.empty() &&
          !retried) {  // forget the curvature pairs and try steepest descent once
        history.clear();
        retried = true;
        continue;
      }
      // No lower point along steepest descent either: F is at its floating-point minimum.
      stop = "line search found no lower point (at numerical precision)";
      converged = MaxAbs(grad) <= 1e3 * options.gradient_tolerance;
      break;
    }
    retried = false;
    Pair pair;
    pair.s.resize(theta.size());
    pair.y.resize(theta.size());
    for (size_t i = 0; i < theta.size(); ++i) {
      pair.s[i] = next.theta[i] - theta[i];
      pair.y[i] = next.grad[i] - grad[i];
    }
    double sy = Dot(pair.s, pair.y);
    if (sy > 1e-12 * Dot(pair.y, pair.y) && sy > 0) {
      pair.rho = 1.0 / sy;
      history.push_back(std::move(pair));
      if (static_cast<int>(history.size()) > options.history) history.pop_front();
    }
    double decrease = f - next.f;
    double scale = std::max({std::abs(f), std::abs(next.f), 1.0});
    theta = std::move(next.theta);
    grad = std::move(next.grad);
    f = next.f;
    ++iter;
    if (decrease <= options.function_tolerance * scale) {
      stop = "function tolerance";
      converged = true;
      break;
    }
  }
  model.iterations = iter;
  model.converged = converged;
  model.stop_reason = stop;
  model.objective = f;
}

// CLIP's λ search: fits on a seeded random part of the training rows, scores on the rest,
// coarse grid points then halved strides around the best; fills the result's λ, trials,
// sample counts and search time, and *best_model (the warm start of the final fit).
Status SearchLambda(const FeatureMatrix& train_all, const std::vector<int64_t>& train_labels,
                    int num_classes, const LinearProbeOptions& options,
                    LinearProbeResult* result_out, LogisticRegressionModel* best_model) {
  LinearProbeResult& result = *result_out;
  // Validation split: a seeded random subset of the training rows.
  int64_t n = train_all.rows;
  int64_t n_val =
      static_cast<int64_t>(std::llround(options.validation_fraction * static_cast<double>(n)));
  n_val = std::max<int64_t>(1, std::min<int64_t>(n_val, n - 1));
  if (n < 2)
    return Status::InvalidArgument(
        "linear probe: need at least 2 training rows for a validation split");
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(options.seed);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(perm[i], perm[rng() % static_cast<uint64_t>(i + 1)]);
  std::vector<int64_t> val_rows(perm.begin(), perm.begin() + n_val),
      fit_rows(perm.begin() + n_val, perm.end());
  std::sort(val_rows.begin(), val_rows.end());
  std::sort(fit_rows.begin(), fit_rows.end());
  FeatureMatrix fit_x = SelectRows(train_all, fit_rows), val_x = SelectRows(train_all, val_rows);
  std::vector<int64_t> fit_y, val_y;
  for (int64_t r : fit_rows) fit_y.push_back(train_labels[r]);
  for (int64_t r : val_rows) val_y.push_back(train_labels[r]);
  result.train_samples = fit_x.rows;
  result.validation_samples = val_x.rows;

  std::vector<double> grid = LambdaGrid(options);
  const int last = static_cast<int>(grid.size()) - 1;
  std::map<int, std::pair<LambdaTrial, LogisticRegressionModel>> done;
  auto search_start = Clock::now();
  auto try_index = [&](int i, const LogisticRegressionModel* from) -> Status {
    LogisticRegressionOptions o = options.solver;
    o.lambda = grid[i];
    MLCD_ASSIGN_OR_RETURN(LogisticRegressionModel m,
                          FitLogisticRegression(fit_x, fit_y, num_classes, o, from));
    LambdaTrial t;
    t.lambda = grid[i];
    t.validation_accuracy = Accuracy(PredictClasses(m, val_x), val_y);
    t.validation_loss = MeanCrossEntropy(m, val_x, val_y);
    t.iterations = m.iterations;
    t.converged = m.converged;
    t.seconds = m.seconds;
    result.trials.push_back(t);
    if (options.on_trial) options.on_trial(t);
    done[i] = {t, std::move(m)};
    return Status::Ok();
  };
  auto best_index = [&]() {
    int best = -1;
    for (const auto& [i, entry] : done) {
      if (best < 0) {
        best = i;
        continue;
      }
      const LambdaTrial& a = entry.first;
      const LambdaTrial& b = done[best].first;
      // Ties (e.g. a warm start that was already converged) go to the larger λ.
      if (a.validation_accuracy > b.validation_accuracy ||
          (a.validation_accuracy == b.validation_accuracy &&
           a.validation_loss <= b.validation_loss))
        best = i;
    }
    return best;
  };
  // Coarse points from the strongest regularisation down, each warm-started from the
  // previous one (the path of solutions is smooth in log lambda).
  std::vector<int> coarse;
  for (int i = 0; i <= last; i += options.initial_stride) coarse.push_back(i);
  if (coarse.back() != last) coarse.push_back(last);
  const LogisticRegressionModel* prev = nullptr;
  for (auto it = coarse.rbegin(); it != coarse.rend(); ++it) {
    MLCD_RETURN_IF_ERROR(try_index(*it, prev));
    prev = &done[*it].second;
  }
  // Halve the interval around the best point until the grid resolution.
  for (int stride = options.initial_stride / 2; stride >= 1; stride /= 2) {
    int best = best_index();
    for (int c : {best + stride, best - stride}) {
      if (c < 0 || c > last || done.count(c)) continue;
      MLCD_RETURN_IF_ERROR(try_index(c, &done[best].second));
    }
  }
  int best = best_index();
  result.lambda = grid[best];
  result.validation_accuracy = done[best].first.validation_accuracy;
  *best_model = done[best].second;
  result.search_seconds = SecondsSince(search_start);
  return Status::Ok();
}

}  // namespace

double LogisticObjective(const FeatureMatrix& x, const std::vector<int64_t>& labels,
                         int num_classes, double lambda, const std::vector<double>& theta,
                         std::vector<double>* gradient) {
  Problem p;
  p.x = &x;
  p.labels = &labels;
  p.num_classes = num_classes;
  p.n = x.rows;
  p.d = x.cols;
  p.lambda = lambda;
  return p.Evaluate(theta, gradient);
}

StatusOr<LogisticRegressionModel> FitLogisticRegression(const FeatureMatrix& x,
                                                        const std::vector<int64_t>& labels,
                                                        int num_classes,
                                                        const LogisticRegressionOptions& options,
                                                        const LogisticRegressionModel* warm_start) {
  auto start = Clock::now();
  MLCD_RETURN_IF_ERROR(CheckFitInput(x, labels, num_classes, options, warm_start));
  const int64_t K = num_classes, d = x.cols;
  // Standardised coordinates (see LogisticRegressionOptions::standardize): x' = (x − μ)/σ,
  // W' = W·diag(σ), b' = b + W μ, penalty weights 1/σ². The same model and objective.
  std::vector<double> mu(static_cast<size_t>(d), 0.0), sigma(static_cast<size_t>(d), 1.0);
  FeatureMatrix standardized;
  const FeatureMatrix* xp = &x;
  if (options.standardize) {
    Standardize(x, &mu, &sigma, &standardized);
    xp = &standardized;
  }
  Problem problem;
  problem.x = xp;
  problem.labels = &labels;
  problem.num_classes = num_classes;
  problem.n = x.rows;
  problem.d = d;
  problem.lambda = options.lambda;
  if (options.standardize) {
    problem.penalty_weight.resize(static_cast<size_t>(d));
    for (int64_t j = 0; j < d; ++j) problem.penalty_weight[j] = 1.0 / (sigma[j] * sigma[j]);
  }

  std::vector<double> theta(problem.size(), 0.0);
  if (warm_start) {
    for (int64_t c = 0; c < K; ++c) {
      double shift = 0;
      for (int64_t j = 0; j < d; ++j) {
        theta[c * d + j] = warm_start->weights[c * d + j] * sigma[j];
        shift += warm_start->weights[c * d + j] * mu[j];
      }
      theta[K * d + c] = warm_start->bias[c] + shift;
    }
  }

  LogisticRegressionModel model;
  model.num_classes = num_classes;
  model.dim = d;
  std::vector<double> grad;
  double f = problem.Evaluate(theta, &grad);
  model.evaluations = 1;
  MinimizeLbfgs(problem, options, &theta, &grad, &f, &model);
  model.gradient_max = MaxAbs(grad);
  model.weights.assign(static_cast<size_t>(K * d), 0.0);
  model.bias.assign(static_cast<size_t>(K), 0.0);
  for (int64_t c = 0; c < K; ++c) {
    double shift = 0;
    for (int64_t j = 0; j < d; ++j) {
      model.weights[c * d + j] = theta[c * d + j] / sigma[j];
      shift += model.weights[c * d + j] * mu[j];
    }
    model.bias[c] = theta[K * d + c] - shift;
  }
  model.seconds = SecondsSince(start);
  return model;
}

std::vector<int64_t> PredictClasses(const LogisticRegressionModel& model, const FeatureMatrix& x) {
  if (x.cols != model.dim || model.num_classes < 1) return {};
  std::vector<double> theta(model.weights);
  theta.insert(theta.end(), model.bias.begin(), model.bias.end());
  std::vector<float> logits = Logits(x, model.num_classes, theta.data());
  const float* z = logits.data();
  std::vector<int64_t> out(static_cast<size_t>(x.rows));
  for (int64_t i = 0; i < x.rows; ++i) {
    const float* zi = z + i * model.num_classes;
    int best = 0;
    for (int c = 1; c < model.num_classes; ++c)
      if (zi[c] > zi[best]) best = c;
    out[i] = best;
  }
  return out;
}

double MeanCrossEntropy(const LogisticRegressionModel& model, const FeatureMatrix& x,
                        const std::vector<int64_t>& labels) {
  std::vector<double> theta(model.weights);
  theta.insert(theta.end(), model.bias.begin(), model.bias.end());
  return LogisticObjective(x, labels, model.num_classes, 0.0, theta, nullptr);
}

double Accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels) {
  if (labels.empty()) return 0;
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size() && i < predictions.size(); ++i)
    correct += predictions[i] == labels[i];
  return static_cast<double>(correct) / static_cast<double>(labels.size());
}

std::vector<double> LambdaGrid(const LinearProbeOptions& options) {
  double lo = std::log10(options.lambda_min), hi = std::log10(options.lambda_max);
  int steps = static_cast<int>(std::lround((hi - lo) * options.steps_per_decade));
  std::vector<double> grid;
  for (int i = 0; i <= steps; ++i)
    grid.push_back(std::pow(10.0, lo + static_cast<double>(i) / options.steps_per_decade));
  return grid;
}

StatusOr<LinearProbeResult> RunLinearProbe(const FeatureMatrix& train,
                                           const std::vector<int64_t>& train_labels,
                                           const FeatureMatrix& test,
                                           const std::vector<int64_t>& test_labels,
                                           const LinearProbeOptions& options) {
  auto start = Clock::now();
  MLCD_RETURN_IF_ERROR(CheckMatrix(train, "linear probe train split"));
  MLCD_RETURN_IF_ERROR(CheckMatrix(test, "linear probe test split"));
  if (train.cols != test.cols)
    return Status::InvalidArgument("linear probe: train features have dimension " +
                                   std::to_string(train.cols) + ", test features " +
                                   std::to_string(test.cols));
  int num_classes = options.num_classes;
  if (num_classes <= 0)
    num_classes = std::max(NumClassesOf(train_labels), NumClassesOf(test_labels));
  if (num_classes < 1) return Status::InvalidArgument("linear probe: no class labels");
  MLCD_RETURN_IF_ERROR(
      CheckLabels(train_labels, train.rows, num_classes, "linear probe train split"));
  MLCD_RETURN_IF_ERROR(CheckLabels(test_labels, test.rows, num_classes, "linear probe test split"));
  bool search = options.fixed_lambda <= 0;
  if (search) {
    if (!(options.validation_fraction > 0 && options.validation_fraction < 1))
      return Status::InvalidArgument("linear probe: validation_fraction must be in (0, 1), got " +
                                     std::to_string(options.validation_fraction));
    if (!(options.lambda_min > 0 && options.lambda_max >= options.lambda_min &&
          std::isfinite(options.lambda_max)))
      return Status::InvalidArgument("linear probe: need 0 < lambda_min <= lambda_max");
    if (options.steps_per_decade < 1 || options.initial_stride < 1)
      return Status::InvalidArgument(
          "linear probe: steps_per_decade and initial_stride must be >= 1");
  }
  FeatureMatrix train_all = train, test_all = test;
  if (options.normalize) {
    L2NormalizeRows(&train_all);
    L2NormalizeRows(&test_all);
  }
  LinearProbeResult result;
  result.num_classes = num_classes;
  result.test_samples = test.rows;
  LogisticRegressionOptions solver = options.solver;
  const LogisticRegressionModel* warm = nullptr;
  LogisticRegressionModel best_model;
  if (!search) {
    result.lambda = options.fixed_lambda;
    result.train_samples = train.rows;
  } else {
    MLCD_RETURN_IF_ERROR(
        SearchLambda(train_all, train_labels, num_classes, options, &result, &best_model));
    warm = &best_model;
  }

  // Refit on train + validation with the chosen lambda; score on test.
  auto final_start = Clock::now();
  solver.lambda = result.lambda;
  MLCD_ASSIGN_OR_RETURN(result.model,
                        FitLogisticRegression(train_all, train_labels, num_classes, solver, warm));
  result.final_fit_seconds = SecondsSince(final_start);
  result.train_accuracy = Accuracy(PredictClasses(result.model, train_all), train_labels);
  result.test_accuracy = Accuracy(PredictClasses(result.model, test_all), test_labels);
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace mlcd::worker
