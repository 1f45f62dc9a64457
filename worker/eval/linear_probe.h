// Linear probe on frozen features, following CLIP's protocol (Radford et al. 2021, appendix
// A.3; the MLCD paper's appendix A.3 uses the same):
//   * multinomial logistic regression fitted full-batch with L-BFGS (at most 1000
//     iterations), on L2-normalised features;
//   * the L2 strength λ is chosen on a validation split carved out of the training set, by
//     CLIP's "parametric binary search" over λ ∈ [1e-6, 1e6] at 8 steps per decade: first
//     λ = 1e-6, 1e-4, ..., 1e6, then the interval around the best value is halved until the
//     resolution is one grid step (at most 7 + 2·4 = 15 fits);
//   * the model is refitted on train + validation with the chosen λ and scored on the test
//     split.
//
// λ follows the scikit-learn convention CLIP used (λ = 1/C): the fit minimises
//     f(W, b) = Σ_i CE(softmax(W x_i + b), y_i) + (λ/2)·||W||²      (bias not penalised)
// so λ is comparable with CLIP's sweep. Internally the solver works on F = f / n (same
// minimiser, better scaled); tolerances below refer to F.
//
//   LinearProbeOptions options;            // CLIP defaults
//   MLCD_ASSIGN_OR_RETURN(LinearProbeResult r,
//                         RunLinearProbe(train.features, train.labels, test.features, test.labels,
//                         options));
//   std::printf("%.2f%% at lambda %g\n", 100 * r.test_accuracy, r.lambda);
//
// Cost: one objective/gradient evaluation is one pass over the features (worker/eval/kernels.h:
// logits, softmax and gradient per row while it is in cache); a fit takes tens to a few
// hundred evaluations (warm starts along the λ path keep it low). bench/experiments/eval_bench
// measures it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/eval/features.h"

namespace mlcd::worker {

struct LogisticRegressionOptions {
  // L2 strength (scikit-learn's 1/C), see above. >= 0.
  double lambda = 1.0;
  // L-BFGS iteration cap (CLIP / the paper: 1000).
  int max_iterations = 1000;
  // Correction pairs kept by L-BFGS (scipy's default 10).
  int history = 10;
  // Converged when max_j |∂F/∂θ_j| <= gradient_tolerance (scikit-learn's default `tol`, which
  // it applies to the same per-sample-mean objective since version 1.1) ...
  double gradient_tolerance = 1e-4;
  // ... or when an iteration lowers F by at most function_tolerance·max(|F_k|, |F_k+1|, 1)
  // (scipy's L-BFGS-B default factr·eps = 2.2e-9).
  double function_tolerance = 2.2e-9;
  // Line-search evaluations per iteration before giving up (strong Wolfe, c1 1e-4, c2 0.9).
  int max_line_search_steps = 20;
  // Optimise in standardised coordinates: x' = (x − μ)/σ per dimension, W' = W·diag(σ),
  // b' = b + Wμ, with the penalty rewritten as λ/2 Σ (W'_cj/σ_j)². This is the same model and
  // the same objective (the bias is not penalised, so centring is free; the penalty stays on
  // the original W), only better conditioned: L2-normalised embeddings share a large mean
  // direction and have small, uneven per-dimension spreads, which makes plain L-BFGS crawl.
  // The tolerances then apply to the gradient in the standardised coordinates.
  bool standardize = true;
};

// A fitted multinomial logistic regression and how the fit ended.
struct LogisticRegressionModel {
  int num_classes = 0;
  int64_t dim = 0;
  std::vector<double> weights;  // num_classes x dim, row-major
  std::vector<double> bias;     // num_classes

  // Fit statistics.
  int iterations = 0;
  int evaluations = 0;      // objective/gradient evaluations, line search included
  bool converged = false;   // a tolerance was met (not the iteration cap)
  std::string stop_reason;  // "gradient tolerance", "function tolerance", "iteration limit", ...
  double objective = 0;     // F = f / n at the solution
  double gradient_max = 0;  // max |∂F/∂θ| at the solution
  double seconds = 0;
};

// F = f/n and, when `gradient` is not null, its gradient with respect to
// theta = [W (row-major), b] (num_classes·(dim+1) values). Exposed for tests (finite
// differences) and for checking convergence from outside.
double LogisticObjective(const FeatureMatrix& x, const std::vector<int64_t>& labels,
                         int num_classes, double lambda, const std::vector<double>& theta,
                         std::vector<double>* gradient);

// Fits the model with L-BFGS, starting from `warm_start` (same classes and dim) or from 0.
// INVALID_ARGUMENT on empty input, label out of [0, num_classes), or a mismatched warm start.
StatusOr<LogisticRegressionModel> FitLogisticRegression(
    const FeatureMatrix& x, const std::vector<int64_t>& labels, int num_classes,
    const LogisticRegressionOptions& options, const LogisticRegressionModel* warm_start = nullptr);

// Arg-max class of every row (ties: the lowest class index); empty when x's dimension is not
// the model's.
std::vector<int64_t> PredictClasses(const LogisticRegressionModel& model, const FeatureMatrix& x);
// Mean cross-entropy of the model on (x, labels), without the penalty.
double MeanCrossEntropy(const LogisticRegressionModel& model, const FeatureMatrix& x,
                        const std::vector<int64_t>& labels);
// Fraction of predictions equal to labels (0 when empty).
double Accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels);

struct LambdaTrial;

struct LinearProbeOptions {
  // Share of the training rows held out (a seeded random subset) for the λ search.
  double validation_fraction = 0.2;
  uint64_t seed = 0;
  // λ grid: 10^(log10(lambda_min) + i/steps_per_decade), i = 0..N, searched by CLIP's
  // parametric binary search starting from every `initial_stride`-th grid point.
  double lambda_min = 1e-6;
  double lambda_max = 1e6;
  int steps_per_decade = 8;
  int initial_stride = 16;
  // > 0: skip the search and use this λ.
  double fixed_lambda = 0;
  // L2-normalise the feature rows first (CLIP probes normalised embeddings; a no-op for
  // embeddings that already are).
  bool normalize = true;
  // Solver settings of every fit (its `lambda` is ignored).
  LogisticRegressionOptions solver;
  // Number of classes; 0 = max label + 1 over train and test.
  int num_classes = 0;
  // Called after every λ tried by the search (progress reporting); may be empty.
  std::function<void(const LambdaTrial&)> on_trial;
};

// One λ tried by the search.
struct LambdaTrial {
  double lambda = 0;
  double validation_accuracy = 0;
  double validation_loss = 0;  // mean cross-entropy on the validation split
  int iterations = 0;
  bool converged = false;
  double seconds = 0;
};

struct LinearProbeResult {
  double test_accuracy = 0;
  double lambda = 0;                // the chosen λ
  double train_accuracy = 0;        // of the final model on train + validation
  double validation_accuracy = 0;   // of the chosen λ in the search
  std::vector<LambdaTrial> trials;  // in the order tried (empty with fixed_lambda)
  LogisticRegressionModel model;    // the final model (fitted on train + validation)
  int64_t train_samples = 0;        // rows the search trained on
  int64_t validation_samples = 0;
  int64_t test_samples = 0;
  int num_classes = 0;
  double search_seconds = 0;
  double final_fit_seconds = 0;
  double seconds = 0;
};

// The whole protocol. INVALID_ARGUMENT when the inputs do not fit together (dimensions,
// label counts, negative labels, too few rows for a validation split, bad options).
StatusOr<LinearProbeResult> RunLinearProbe(const FeatureMatrix& train,
                                           const std::vector<int64_t>& train_labels,
                                           const FeatureMatrix& test,
                                           const std::vector<int64_t>& test_labels,
                                           const LinearProbeOptions& options);

// The λ grid RunLinearProbe searches (exposed for tests).
std::vector<double> LambdaGrid(const LinearProbeOptions& options);

}  // namespace mlcd::worker
