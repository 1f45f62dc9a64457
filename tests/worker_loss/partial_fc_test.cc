// The PartialFc layer against math: hand-worked cases, finite differences of a double
// precision transcription of the definitions, MLC(l=1) == softmax, stability at s = 128,
// the sampling rule, the sparse AdamW, sharded (real Gloo groups, one thread per rank) ==
// unsharded, and save/load with resharding 2 -> 3.
#include "worker/loss/partial_fc.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/net.h"
#include "tests/testing/process.h"
#include "tests/worker_loss/run_ranks.h"

namespace mlcd::worker {
namespace {

constexpr double kPi = 3.14159265358979323846;

at::Tensor Randn(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::kFloat);
}

at::Tensor Labels(const std::vector<std::vector<int64_t>>& rows) {
  int64_t l = static_cast<int64_t>(rows[0].size());
  at::Tensor t = at::empty({static_cast<int64_t>(rows.size()), l}, at::kLong);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t j = 0; j < l; ++j) t[i][j] = rows[i][j];
  return t;
}

at::Tensor Ids(const std::vector<int64_t>& ids) {
  return at::from_blob(const_cast<int64_t*>(ids.data()), {static_cast<int64_t>(ids.size())},
                       at::kLong)
      .clone();
}

PartialFcOptions Options(int64_t K, int64_t D, LossVariant v, MarginType mt, double s, double m,
                         PartialFcLayer layer = PartialFcLayer::kHost) {
  PartialFcOptions o;
  o.layer = layer;
  o.num_classes = K;
  o.embedding_dim = D;
  o.variant = v;
  o.margin_type = mt;
  o.scale = s;
  o.margin = m;
  o.sample_ratio = 1.0;
  o.seed = 7;
  return o;
}

std::unique_ptr<PartialFc> MustCreate(const PartialFcOptions& o, Collectives* comm) {
  auto pfc = PartialFc::Create(o, comm);
  EXPECT_TRUE(pfc.ok()) << pfc.status().ToString();
  return pfc.ok() ? std::move(pfc).value() : nullptr;
}

// A W = 1 layer whose centres are `weights`.
std::unique_ptr<PartialFc> LayerWith(Collectives* comm, const PartialFcOptions& o,
                                     const at::Tensor& weights) {
  auto pfc = PartialFc::Create(o, comm);
  EXPECT_TRUE(pfc.ok()) << pfc.status().ToString();
  PartialFcShardState st;
  st.range = {0, o.num_classes};
  st.num_classes = o.num_classes;
  st.embedding_dim = o.embedding_dim;
  st.weight = weights;
  Status s = (*pfc)->ImportState({st});
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::move(*pfc);
}

// ---- A double-precision transcription of the definitions (docs/loss.md), loops only.
struct Reference {
  LossVariant variant;
  MarginType margin_type;
  double s, m;
  // When set, positive logits are s·c + offset with the offset frozen at the values of
  // `frozen_at` (PartialFC's convention): finite differences of this give the layer's gradient.
  bool freeze_margin = false;

  double MarginLogit(double c) const {
    switch (margin_type) {
      case MarginType::kArc:
        return s * std::cos(std::acos(c) + m);
      case MarginType::kCos:
        return s * (c - m);
      case MarginType::kNone:
        return s * c;
    }
    return 0;
  }
  static double LogSumExp(const std::vector<double>& x) {  // includes nothing else
    double mx = -INFINITY;
    for (double v : x) mx = std::max(mx, v);
    if (!std::isfinite(mx)) return -INFINITY;
    double sum = 0;
    for (double v : x) sum += std::exp(v - mx);
    return mx + std::log(sum);
  }
  // E [B][D], W [K][D] raw; Y labels; S sampled class ids.
  double Loss(const std::vector<std::vector<double>>& E, const std::vector<std::vector<double>>& W,
              const std::vector<std::vector<int64_t>>& Y, const std::set<int64_t>& S,
              const std::vector<std::vector<double>>* frozen_E = nullptr,
              const std::vector<std::vector<double>>* frozen_W = nullptr) const {
    auto cosine = [](const std::vector<double>& a, const std::vector<double>& b) {
      double ab = 0, aa = 0, bb = 0;
      for (size_t d = 0; d < a.size(); ++d) ab += a[d] * b[d], aa += a[d] * a[d], bb += b[d] * b[d];
      return std::max(-1.0, std::min(1.0, ab / std::sqrt(aa) / std::sqrt(bb)));
    };
    double total = 0;
    for (size_t i = 0; i < E.size(); ++i) {
      std::set<int64_t> P;
      for (size_t j = 0; j < Y[i].size(); ++j) {
        if (Y[i][j] < 0 || (variant == LossVariant::kSoftmax && j > 0)) continue;
        P.insert(Y[i][j]);
      }
      std::vector<double> neg, pos;  // z_n, and -z_p
      double zt = 0;
      for (int64_t c : S) {
        double cs = cosine(E[i], W[c]);
        if (P.count(c)) {
          double z = MarginLogit(cs);
          if (freeze_margin) {
            double c0 = cosine((*frozen_E)[i], (*frozen_W)[c]);
            z = s * cs + (MarginLogit(c0) - s * c0);
          }
          pos.push_back(-z);
          zt = z;
          if (variant == LossVariant::kSoftmax) neg.push_back(z);
        } else {
          neg.push_back(s * cs);
        }
      }
      switch (variant) {
        case LossVariant::kMlcd: {
          pos.push_back(0.0);
          neg.push_back(0.0);
          total += LogSumExp(pos) + LogSumExp(neg);
          break;
        }
        case LossVariant::kMlc: {
          if (pos.empty() || neg.empty()) break;
          double u = LogSumExp(neg) + LogSumExp(pos);
          total += LogSumExp({0.0, u});
          break;
        }
        case LossVariant::kSoftmax:
          if (!P.empty()) total += LogSumExp(neg) - zt;
          break;
      }
    }
    return total / static_cast<double>(E.size());
  }
};

std::vector<std::vector<double>> ToRows(const at::Tensor& t) {
  at::Tensor d = t.to(at::kDouble).contiguous();
  std::vector<std::vector<double>> rows(d.size(0), std::vector<double>(d.size(1)));
  for (int64_t i = 0; i < d.size(0); ++i)
    for (int64_t j = 0; j < d.size(1); ++j) rows[i][j] = d[i][j].item<double>();
  return rows;
}

std::vector<std::vector<int64_t>> ToLabelRows(const at::Tensor& t) {
  std::vector<std::vector<int64_t>> rows(t.size(0), std::vector<int64_t>(t.size(1)));
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j) rows[i][j] = t[i][j].item<int64_t>();
  return rows;
}

// ---- Hand-worked cases. e = (1, 0); w0 at 60° (c = 0.5), w1 = (0, 1) (c = 0), w2 = (-1, 0)
// (c = -1). Arc margin m = π/6 turns the positive's θ = 60° into 90°: z_p = s·cos 90° = 0.
struct HandCase {
  at::Tensor E = at::tensor(std::vector<float>{2.0f, 0.0f})
                     .view({1, 2});  // norm 2: tests the normalisation too
  at::Tensor W = at::tensor(std::vector<float>{0.5f, static_cast<float>(std::sqrt(3.0) / 2), 0.0f,
                                               3.0f, -1.0f, 0.0f})
                     .view({3, 2});
  at::Tensor Y = Labels({{0}});
  at::Tensor N = Ids({1, 2});
  double s = 2.0, m = kPi / 6;
};

TEST(PartialFcHandTest, MlcdArcMargin) {
  HandCase h;
  auto comm = Collectives::Local();
  auto pfc =
      LayerWith(comm.get(), Options(3, 2, LossVariant::kMlcd, MarginType::kArc, h.s, h.m), h.W);
  auto r = pfc->ForwardBackwardWithNegatives(h.E, h.Y, h.N);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // L = log(1 + e^{-0}) + log(1 + e^{0} + e^{-2}).
  const double q = 2.0 + std::exp(-2.0);
  EXPECT_NEAR(r->loss, std::log(2.0) + std::log(q), 1e-6);
  // dL/dz_p = -1/2, dL/dz_n1 = 1/q, dL/dz_n2 = e^{-2}/q; dL/dc = s·dL/dz (margin convention).
  // g = Σ dL/dc_j ŵ_j; dL/de = (g − ê(ê·g)) / |e| keeps the y part over |e| = 2.
  const double gy = h.s * (-0.5 * std::sqrt(3.0) / 2 + 1.0 / q);
  EXPECT_NEAR(r->grad_embeddings[0][0].item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(r->grad_embeddings[0][1].item<double>(), gy / 2.0, 1e-6);
  // Centre gradients: dL/dŵ_j = dL/dc_j · ê, projected orthogonally to ŵ_j, over |w_j|.
  at::Tensor gw = pfc->last_weight_gradient();
  EXPECT_TRUE(pfc->last_sampled_classes().equal(Ids({0, 1, 2})));
  // w0 = (1/2, √3/2), |w0| = 1: (−1)·[(1,0) − 0.5·w0] = (−0.75, √3/4).
  EXPECT_NEAR(gw[0][0].item<double>(), -h.s * 0.5 * 0.75, 1e-6);
  EXPECT_NEAR(gw[0][1].item<double>(), h.s * 0.5 * std::sqrt(3.0) / 4, 1e-6);
  // w1 = (0, 3): (s/q)·(1, 0) / 3.
  EXPECT_NEAR(gw[1][0].item<double>(), h.s / q / 3.0, 1e-6);
  EXPECT_NEAR(gw[1][1].item<double>(), 0.0, 1e-6);
  // w2 = (-1, 0): ê is parallel to ŵ2, so the projection removes everything.
  EXPECT_NEAR(gw[2].abs().max().item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(r->stats.mean_positive_cosine, 0.5, 1e-6);
  EXPECT_NEAR(r->stats.mean_negative_cosine, -0.5, 1e-6);
  EXPECT_EQ(r->stats.positive_pairs, 1);
  EXPECT_EQ(r->stats.negative_pairs, 2);
  EXPECT_EQ(r->stats.sampled_classes, 3);
}

TEST(PartialFcHandTest, MlcAndSoftmaxArcMargin) {
  HandCase h;
  auto comm = Collectives::Local();
  const double q = 2.0 + std::exp(-2.0);
  for (LossVariant v : {LossVariant::kMlc, LossVariant::kSoftmax}) {
    auto pfc = LayerWith(comm.get(), Options(3, 2, v, MarginType::kArc, h.s, h.m), h.W);
    auto r = pfc->ForwardBackwardWithNegatives(h.E, h.Y, h.N);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    // MLC: log(1 + (e^0 + e^{-2}) · e^{-0}) = log q. Softmax: −0 + log(e^0 + e^0 + e^{-2}) = log q.
    EXPECT_NEAR(r->loss, std::log(q), 1e-6) << LossVariantName(v);
    // dL/dz_p = −(1 + e^{-2})/q, dL/dz_n1 = 1/q: the y part of dL/de as above.
    const double gy = h.s * (-(1.0 + std::exp(-2.0)) / q * std::sqrt(3.0) / 2 + 1.0 / q);
    EXPECT_NEAR(r->grad_embeddings[0][1].item<double>(), gy / 2.0, 1e-6) << LossVariantName(v);
  }
}

TEST(PartialFcHandTest, CosineMarginAndNoMargin) {
  HandCase h;
  auto comm = Collectives::Local();
  // cos margin 0.5: z_p = 2·(0.5 − 0.5) = 0 again; none: z_p = 2·0.5 = 1.
  auto cos_layer =
      LayerWith(comm.get(), Options(3, 2, LossVariant::kMlcd, MarginType::kCos, 2.0, 0.5), h.W);
  auto r = cos_layer->ForwardBackwardWithNegatives(h.E, h.Y, h.N);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->loss, std::log(2.0) + std::log(2.0 + std::exp(-2.0)), 1e-6);
  auto none_layer =
      LayerWith(comm.get(), Options(3, 2, LossVariant::kMlcd, MarginType::kNone, 2.0, 0.5), h.W);
  r = none_layer->ForwardBackwardWithNegatives(h.E, h.Y, h.N);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->loss, std::log(1.0 + std::exp(-1.0)) + std::log(2.0 + std::exp(-2.0)), 1e-6);
}

// ---- Finite differences of the reference (double) against the layer's analytic gradients.
struct TinyCase {
  int64_t B = 5, D = 4, K = 9;
  at::Tensor E = Randn({5, 4}, 11);
  at::Tensor W = Randn({9, 4}, 12);
  at::Tensor Y = Labels({{1, 4}, {4, -1}, {7, 0}, {-1, -1}, {2, 2}});  // padding, duplicates
  at::Tensor N = Ids({3, 5, 5, 8});
  std::set<int64_t> S() const {
    return {0, 1, 2, 3, 4, 5, 7, 8};
  }  // N ∪ labels; class 6 is not sampled
};

void CheckFiniteDifferences(LossVariant v, MarginType mt, PartialFcLayer layer) {
  SCOPED_TRACE(std::string(LossVariantName(v)) + "/" + MarginTypeName(mt) + " " +
               PartialFcLayerName(layer));
  TinyCase t;
  const double s = 6.0, m = 0.3;
  auto comm = Collectives::Local();
  auto pfc = LayerWith(comm.get(), Options(t.K, t.D, v, mt, s, m, layer), t.W);
  auto r = pfc->ForwardBackwardWithNegatives(t.E, t.Y, t.N);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto E = ToRows(t.E), W = ToRows(t.W);
  auto Y = ToLabelRows(t.Y);
  Reference ref{v, mt, s, m};
  EXPECT_NEAR(r->loss, ref.Loss(E, W, Y, t.S()), 2e-6 * std::max(1.0, std::fabs(r->loss)));
  Reference frozen = ref;
  frozen.freeze_margin = true;
  const auto E0 = E, W0 = W;
  const double h = 1e-6;
  auto fd = [&](std::vector<std::vector<double>>& X, int64_t i, int64_t d) {
    double keep = X[i][d];
    X[i][d] = keep + h;
    double up = frozen.Loss(E, W, Y, t.S(), &E0, &W0);
    X[i][d] = keep - h;
    double down = frozen.Loss(E, W, Y, t.S(), &E0, &W0);
    X[i][d] = keep;
    return (up - down) / (2 * h);
  };
  double max_err = 0, max_grad = 0;
  for (int64_t i = 0; i < t.B; ++i) {
    for (int64_t d = 0; d < t.D; ++d) {
      double want = fd(E, i, d), got = r->grad_embeddings[i][d].item<double>();
      max_err = std::max(max_err, std::fabs(want - got));
      max_grad = std::max(max_grad, std::fabs(want));
    }
  }
  at::Tensor classes = pfc->last_sampled_classes();
  at::Tensor gw = pfc->last_weight_gradient();
  ASSERT_EQ(classes.numel(), static_cast<int64_t>(t.S().size()));
  for (int64_t q = 0; q < classes.numel(); ++q) {
    int64_t c = classes[q].item<int64_t>();
    EXPECT_TRUE(t.S().count(c));
    for (int64_t d = 0; d < t.D; ++d) {
      double want = fd(W, c, d), got = gw[q][d].item<double>();
      max_err = std::max(max_err, std::fabs(want - got));
      max_grad = std::max(max_grad, std::fabs(want));
    }
  }
  EXPECT_GT(max_grad, 1e-3);  // the check is not vacuous
  EXPECT_LT(max_err, 1e-5 * std::max(1.0, max_grad))
      << "max |analytic - finite difference| = " << max_err;
}

// Both layers: the fused host layer and the device layer on CPU tensors.
TEST(PartialFcGradientTest, FiniteDifferencesEveryVariantAndMargin) {
  for (PartialFcLayer layer : {PartialFcLayer::kHost, PartialFcLayer::kDevice}) {
    for (LossVariant v : {LossVariant::kMlcd, LossVariant::kMlc, LossVariant::kSoftmax}) {
      for (MarginType mt : {MarginType::kArc, MarginType::kCos, MarginType::kNone})
        CheckFiniteDifferences(v, mt, layer);
    }
  }
}

TEST(PartialFcGradientTest, MarginConventionDiffersFromTheTrueDerivative) {
  // The arc margin's true derivative is s·sin(θ+m)/sin θ, not s: the frozen-offset reference
  // and the true one must differ, so the test above checks the convention, not an accident.
  TinyCase t;
  auto E = ToRows(t.E), W = ToRows(t.W);
  auto Y = ToLabelRows(t.Y);
  Reference ref{LossVariant::kMlcd, MarginType::kArc, 6.0, 0.3};
  Reference frozen = ref;
  frozen.freeze_margin = true;
  const auto E0 = E, W0 = W;
  const double h = 1e-6;
  E[0][0] += h;
  double true_up = ref.Loss(E, W, Y, t.S()), frozen_up = frozen.Loss(E, W, Y, t.S(), &E0, &W0);
  EXPECT_GT(std::fabs(true_up - frozen_up) / h, 1e-3);
}

TEST(PartialFcGradientTest, MlcWithOneLabelEqualsSoftmax) {
  const int64_t B = 6, D = 8, K = 20;
  at::Tensor E = Randn({B, D}, 21), W = Randn({K, D}, 22);
  at::Tensor Y = Labels({{3}, {3}, {17}, {0}, {9}, {12}});
  at::Tensor N = Ids({1, 2, 5, 6, 8, 11, 19});
  auto comm = Collectives::Local();
  for (MarginType mt : {MarginType::kArc, MarginType::kCos, MarginType::kNone}) {
    auto mlc = LayerWith(comm.get(), Options(K, D, LossVariant::kMlc, mt, 16.0, 0.3), W);
    auto sm = LayerWith(comm.get(), Options(K, D, LossVariant::kSoftmax, mt, 16.0, 0.3), W);
    auto a = mlc->ForwardBackwardWithNegatives(E, Y, N);
    auto b = sm->ForwardBackwardWithNegatives(E, Y, N);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(a->loss, b->loss, 1e-5 * b->loss);
    EXPECT_TRUE(at::allclose(a->grad_embeddings, b->grad_embeddings, 1e-4, 1e-6));
    EXPECT_TRUE(at::allclose(mlc->last_weight_gradient(), sm->last_weight_gradient(), 1e-4, 1e-6));
  }
}

TEST(PartialFcStabilityTest, ScaleUpTo128AndBeyond) {
  // Cosines at ±1 and near 1: at s = 128 exp(z) overflows float32 without the shifts.
  const int64_t D = 6, K = 12;
  at::Tensor W = Randn({K, D}, 31);
  at::Tensor E = at::stack({W[0] * 3, W[5] * -1, W[7] + 0.01 * W[8], W[1] + W[2]});
  at::Tensor Y = Labels({{0, 1}, {5, -1}, {2, 3}, {1, 2}});
  at::Tensor N = Ids({4, 5, 6, 7, 8, 9, 10, 11});
  std::set<int64_t> S{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  auto comm = Collectives::Local();
  for (PartialFcLayer layer : {PartialFcLayer::kHost, PartialFcLayer::kDevice}) {
    for (double s : {64.0, 128.0, 400.0}) {
      for (LossVariant v : {LossVariant::kMlcd, LossVariant::kMlc, LossVariant::kSoftmax}) {
        SCOPED_TRACE(std::string(LossVariantName(v)) + " s=" + std::to_string(s) + " " +
                     PartialFcLayerName(layer));
        auto pfc = LayerWith(comm.get(), Options(K, D, v, MarginType::kArc, s, 0.3, layer), W);
        auto r = pfc->ForwardBackwardWithNegatives(E, Y, N);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        Reference ref{v, MarginType::kArc, s, 0.3};
        double want = ref.Loss(ToRows(E), ToRows(W), ToLabelRows(Y), S);
        EXPECT_TRUE(std::isfinite(r->loss));
        // Float32 cosines near 1 feed arccos, whose slope is unbounded there: a 6e-8 error in c
        // moves θ by ~3e-4, i.e. z by ~s·1e-4. Relative 1e-4 on L still catches any overflow.
        EXPECT_NEAR(r->loss, want, 1e-4 * std::max(1.0, want));
        EXPECT_TRUE(at::isfinite(r->grad_embeddings).all().item<bool>());
        EXPECT_TRUE(at::isfinite(pfc->last_weight_gradient()).all().item<bool>());
      }
    }
  }
}

// ---- Sampling.
TEST(PartialFcSamplingTest, PositivesPlusRandomNegativesUpToTheBudget) {
  const int64_t K = 200, D = 4;
  PartialFcOptions o = Options(K, D, LossVariant::kMlcd, MarginType::kArc, 16, 0.3);
  o.sample_ratio = 0.1;  // budget ceil(0.1 · 200) = 20
  auto comm = Collectives::Local();
  auto pfc = MustCreate(o, comm.get());
  at::Tensor E = Randn({3, D}, 41);
  at::Tensor Y = Labels({{5, 150}, {150, -1}, {199, 0}});
  std::vector<std::set<int64_t>> draws;
  for (int step = 0; step < 3; ++step) {
    auto r = pfc->ForwardBackward(E, Y);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->stats.sampled_classes, 20);
    at::Tensor c = pfc->last_sampled_classes();
    std::set<int64_t> set;
    for (int64_t q = 0; q < c.numel(); ++q) set.insert(c[q].item<int64_t>());
    EXPECT_EQ(set.size(), 20u);
    for (int64_t p : {0, 5, 150, 199}) EXPECT_TRUE(set.count(p)) << p;
    draws.push_back(set);
    ASSERT_TRUE(pfc->OptimizerStep(1e-3).ok());
  }
  EXPECT_NE(draws[0], draws[1]);  // redrawn every step
  EXPECT_NE(draws[1], draws[2]);
  // Same seed, same step: the same draw (a resumed run samples what the original did).
  auto again = MustCreate(o, comm.get());
  ASSERT_TRUE(again->ForwardBackward(E, Y).ok());
  at::Tensor c = again->last_sampled_classes();
  std::set<int64_t> set;
  for (int64_t q = 0; q < c.numel(); ++q) set.insert(c[q].item<int64_t>());
  EXPECT_EQ(set, draws[0]);
}

TEST(PartialFcSamplingTest, OnlyPositivesWhenTheyExceedTheBudget) {
  const int64_t K = 50, D = 4;
  PartialFcOptions o = Options(K, D, LossVariant::kMlcd, MarginType::kArc, 16, 0.3);
  o.sample_ratio = 0.1;  // budget 5
  auto comm = Collectives::Local();
  auto pfc = MustCreate(o, comm.get());
  auto r = pfc->ForwardBackward(Randn({4, D}, 42), Labels({{1, 2}, {3, 4}, {5, 6}, {7, 7}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.sampled_classes, 7);
  EXPECT_TRUE(pfc->last_sampled_classes().equal(Ids({1, 2, 3, 4, 5, 6, 7})));
}

TEST(PartialFcSamplingTest, DenseDrawWhenTheRatioIsLarge) {
  const int64_t K = 40, D = 4;
  PartialFcOptions o = Options(K, D, LossVariant::kMlc, MarginType::kArc, 16, 0.3);
  o.sample_ratio = 0.9;  // 36 of 40: selection sampling path
  auto comm = Collectives::Local();
  auto pfc = MustCreate(o, comm.get());
  auto r = pfc->ForwardBackward(Randn({2, D}, 43), Labels({{39}, {0}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.sampled_classes, 36);
  at::Tensor c = pfc->last_sampled_classes();
  EXPECT_EQ(std::get<0>(at::_unique(c)).numel(), 36);
  EXPECT_EQ(c[0].item<int64_t>(), 0);
  EXPECT_EQ(c[35].item<int64_t>(), 39);
}

TEST(PartialFcTest, ShardRangesCoverTheClasses) {
  EXPECT_EQ(ShardClassRange(10, 3, 0), (ClassRange{0, 3}));
  EXPECT_EQ(ShardClassRange(10, 3, 1), (ClassRange{3, 6}));
  EXPECT_EQ(ShardClassRange(10, 3, 2), (ClassRange{6, 10}));
  EXPECT_EQ(ShardClassRange(2, 3, 0).size(), 0);
  for (int64_t K : {1, 7, 1000003}) {
    for (int W : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int r = 0; r < W; ++r) {
        ClassRange c = ShardClassRange(K, W, r);
        EXPECT_EQ(c.begin, next);
        EXPECT_LE(c.size(), K / W + 1);
        next = c.end;
      }
      EXPECT_EQ(next, K);
    }
  }
}

// ---- Sparse AdamW.
class PartialFcOptimizerTest : public ::testing::TestWithParam<PartialFcLayer> {};

TEST_P(PartialFcOptimizerTest, LazyAdamWOnSampledRowsOnly) {
  const int64_t K = 30, D = 5;
  PartialFcOptions o = Options(K, D, LossVariant::kMlcd, MarginType::kArc, 16, 0.3, GetParam());
  o.sample_ratio = 0.2;
  o.weight_decay = 0.1;
  auto comm = Collectives::Local();
  auto pfc = MustCreate(o, comm.get());
  EXPECT_EQ(pfc->OptimizerStep(0.1).code(), StatusCode::kFailedPrecondition);
  at::Tensor E = Randn({4, D}, 51);
  at::Tensor Y = Labels({{1, 2}, {2, -1}, {8, 9}, {20, 1}});
  // Reference state in double.
  at::Tensor w = pfc->weight().to(at::kDouble).clone();
  at::Tensor m1 = at::zeros_like(w), m2 = at::zeros_like(w);
  std::vector<int64_t> t(K, 0);
  const double lr = 0.05;
  for (int step = 0; step < 3; ++step) {
    auto r = pfc->ForwardBackward(E, Y);
    ASSERT_TRUE(r.ok());
    at::Tensor classes = pfc->last_sampled_classes();
    at::Tensor g = pfc->last_weight_gradient().to(at::kDouble);
    EXPECT_EQ(classes.numel(), 6);
    at::Tensor before = pfc->weight().clone();
    ASSERT_TRUE(pfc->OptimizerStep(lr).ok());
    EXPECT_FALSE(pfc->has_pending_gradient());
    std::set<int64_t> sampled;
    for (int64_t q = 0; q < classes.numel(); ++q) {
      int64_t c = classes[q].item<int64_t>();
      sampled.insert(c);
      int64_t tc = ++t[c];
      w[c] *= 1 - lr * o.weight_decay;
      m1[c] = o.beta1 * m1[c] + (1 - o.beta1) * g[q];
      m2[c] = o.beta2 * m2[c] + (1 - o.beta2) * g[q] * g[q];
      at::Tensor denom = (m2[c] / (1 - std::pow(o.beta2, tc))).sqrt() + o.eps;
      w[c] -= lr / (1 - std::pow(o.beta1, tc)) * m1[c] / denom;
    }
    for (int64_t c = 0; c < K; ++c) {
      if (!sampled.count(c)) {
        EXPECT_TRUE(pfc->weight()[c].equal(before[c])) << "row " << c << " changed";
      }
    }
    EXPECT_TRUE(at::allclose(pfc->weight().to(at::kDouble), w, 1e-5, 1e-7));
  }
  PartialFcShardState st = pfc->ExportState();
  EXPECT_EQ(st.step, 3);
  for (int64_t c = 0; c < K; ++c) EXPECT_EQ(st.row_steps[c].item<int64_t>(), t[c]);
  EXPECT_TRUE(at::allclose(st.exp_avg.to(at::kDouble), m1, 1e-5, 1e-9));
}

INSTANTIATE_TEST_SUITE_P(Layers, PartialFcOptimizerTest,
                         ::testing::Values(PartialFcLayer::kHost, PartialFcLayer::kDevice),
                         [](const ::testing::TestParamInfo<PartialFcLayer>& info) {
                           return std::string(PartialFcLayerName(info.param));
                         });

TEST(PartialFcTest, BadInputsAreRejected) {
  auto comm = Collectives::Local();
  PartialFcOptions o = Options(10, 4, LossVariant::kMlcd, MarginType::kArc, 16, 0.3);
  auto pfc = MustCreate(o, comm.get());
  at::Tensor E = Randn({2, 4}, 61);
  EXPECT_EQ(pfc->ForwardBackward(Randn({2, 5}, 1), Labels({{1}, {2}})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pfc->ForwardBackward(E.to(at::kDouble), Labels({{1}, {2}})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pfc->ForwardBackward(E, Labels({{1}, {2}, {3}})).status().code(),
            StatusCode::kInvalidArgument);
  auto big = pfc->ForwardBackward(E, Labels({{1}, {10}}));
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("num_classes"), std::string::npos)
      << big.status().message();
  EXPECT_EQ(pfc->ForwardBackward(E.narrow(0, 0, 0), Labels({{1}}).narrow(0, 0, 0)).status().code(),
            StatusCode::kInvalidArgument);
  at::Tensor nan = E.clone();
  nan[0][0] = NAN;
  EXPECT_EQ(pfc->ForwardBackward(nan, Labels({{1}, {2}})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(pfc->has_pending_gradient());
  EXPECT_EQ(pfc->ForwardBackwardWithNegatives(E, Labels({{1}, {2}}), Ids({10})).status().code(),
            StatusCode::kInvalidArgument);
  o.sample_ratio = 0;
  EXPECT_EQ(PartialFc::Create(o, comm.get()).status().code(), StatusCode::kInvalidArgument);
  o.sample_ratio = 0.1;
  o.num_classes = 0;
  EXPECT_EQ(PartialFc::Create(o, comm.get()).status().code(), StatusCode::kInvalidArgument);
}

// ---- Several ranks: real Gloo groups over loopback, one thread per rank (run_ranks.h).

// Global batch of 7 split unevenly; r = 1 samples every class, so any world size computes
// the same function and the same optimizer updates.
struct TrainCase {
  int64_t B = 7, D = 6, K = 11;
  at::Tensor E = Randn({7, 6}, 71);
  at::Tensor Y = Labels({{0, 3}, {10, -1}, {5, 6}, {6, 0}, {2, 9}, {-1, -1}, {4, 4}});
  PartialFcOptions options() const {
    PartialFcOptions o = Options(K, D, LossVariant::kMlcd, MarginType::kArc, 8, 0.3);
    o.weight_decay = 0.05;
    return o;
  }
  int64_t Begin(int world, int rank) const { return (B * rank) / world; }
};

struct RunResult {
  std::vector<double> losses;
  at::Tensor grad_embeddings;  // of the last step, [B, D]
  at::Tensor weight;           // after the last step, [K, D]
};

// `steps` steps at `world` ranks; optionally starting from / ending with a checkpoint dir.
RunResult Train(const TrainCase& tc, int world, int steps, const std::string& load_dir = "",
                const std::string& save_dir = "") {
  RunResult out;
  out.losses.assign(steps, 0);
  out.grad_embeddings = at::zeros({tc.B, tc.D});
  out.weight = at::zeros({tc.K, tc.D});
  std::mutex mu;
  RunRanks(world, [&](int rank, Collectives& comm) {
    auto pfc = PartialFc::Create(tc.options(), &comm);
    ASSERT_TRUE(pfc.ok());
    if (!load_dir.empty()) {
      Status s = (*pfc)->Load(load_dir);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    int64_t b0 = tc.Begin(world, rank), b1 = tc.Begin(world, rank + 1);
    for (int step = 0; step < steps; ++step) {
      // A different batch each step: rotate the embeddings.
      at::Tensor E = tc.E.roll({(*pfc)->step()}, {0});
      auto r = (*pfc)->ForwardBackward(E.narrow(0, b0, b1 - b0), tc.Y.narrow(0, b0, b1 - b0));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      std::lock_guard<std::mutex> lock(mu);
      if (rank == 0) out.losses[step] = r->loss;
      if (step + 1 == steps) out.grad_embeddings.narrow(0, b0, b1 - b0).copy_(r->grad_embeddings);
      ASSERT_TRUE((*pfc)->OptimizerStep(0.01).ok());
    }
    ClassRange range = (*pfc)->class_range();
    {
      std::lock_guard<std::mutex> lock(mu);
      out.weight.narrow(0, range.begin, range.size()).copy_((*pfc)->weight());
    }
    if (!save_dir.empty()) {
      Status s = (*pfc)->Save(save_dir);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  });
  return out;
}

TEST(PartialFcShardedTest, TwoAndThreeRanksEqualOneRank) {
  TrainCase tc;
  RunResult one = Train(tc, 1, 3);
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    RunResult many = Train(tc, world, 3);
    for (int s = 0; s < 3; ++s) EXPECT_NEAR(many.losses[s], one.losses[s], 1e-5 * one.losses[s]);
    EXPECT_TRUE(at::allclose(many.grad_embeddings, one.grad_embeddings, 1e-4, 1e-6));
    EXPECT_TRUE(at::allclose(many.weight, one.weight, 1e-4, 1e-6));
  }
}

TEST(PartialFcShardedTest, InitialisationDoesNotDependOnTheWorldSize) {
  TrainCase tc;
  RunResult one = Train(tc, 1, 0), three = Train(tc, 3, 0);
  EXPECT_TRUE(one.weight.equal(three.weight));
  EXPECT_GT(one.weight.abs().max().item<double>(), 0);
}

TEST(PartialFcCheckpointTest, SaveAtTwoRanksResumeAtThree) {
  TrainCase tc;
  testing::TempDir dir;
  RunResult straight = Train(tc, 1, 4);
  RunResult first = Train(tc, 2, 2, "", dir.path());
  RunResult resumed = Train(tc, 3, 2, dir.path());
  EXPECT_NEAR(first.losses[1], straight.losses[1], 1e-5 * straight.losses[1]);
  EXPECT_NEAR(resumed.losses[0], straight.losses[2], 1e-5 * straight.losses[2]);
  EXPECT_NEAR(resumed.losses[1], straight.losses[3], 1e-5 * straight.losses[3]);
  EXPECT_TRUE(at::allclose(resumed.weight, straight.weight, 1e-4, 1e-6));
}

TEST(PartialFcCheckpointTest, ReshardedStateIsExact) {
  // r < 1: the draw depends on the shard, but the state itself must move bit for bit.
  const int64_t K = 23, D = 3;
  PartialFcOptions o = Options(K, D, LossVariant::kMlcd, MarginType::kArc, 16, 0.3);
  o.sample_ratio = 0.3;
  testing::TempDir dir;
  at::Tensor saved_w = at::zeros({K, D}), saved_m = at::zeros({K, D}), saved_v = at::zeros({K, D});
  at::Tensor saved_t = at::zeros({K}, at::kLong);
  std::mutex mu;
  RunRanks(2, [&](int rank, Collectives& comm) {
    auto pfc = MustCreate(o, &comm);
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(
          pfc->ForwardBackward(Randn({2, D}, 80 + rank + s), Labels({{rank * 10 + s}, {22}})).ok());
      ASSERT_TRUE(pfc->OptimizerStep(0.1).ok());
    }
    ASSERT_TRUE(pfc->Save(dir.path()).ok());
    PartialFcShardState st = pfc->ExportState();
    std::lock_guard<std::mutex> lock(mu);
    saved_w.narrow(0, st.range.begin, st.range.size()).copy_(st.weight);
    saved_m.narrow(0, st.range.begin, st.range.size()).copy_(st.exp_avg);
    saved_v.narrow(0, st.range.begin, st.range.size()).copy_(st.exp_avg_sq);
    saved_t.narrow(0, st.range.begin, st.range.size()).copy_(st.row_steps);
  });
  EXPECT_GT(saved_t.sum().item<int64_t>(), 0);
  RunRanks(3, [&](int rank, Collectives& comm) {
    auto pfc = MustCreate(o, &comm);
    ASSERT_TRUE(pfc->Load(dir.path()).ok());
    PartialFcShardState st = pfc->ExportState();
    EXPECT_EQ(st.step, 3);
    EXPECT_TRUE(st.weight.equal(saved_w.narrow(0, st.range.begin, st.range.size())));
    EXPECT_TRUE(st.exp_avg.equal(saved_m.narrow(0, st.range.begin, st.range.size())));
    EXPECT_TRUE(st.exp_avg_sq.equal(saved_v.narrow(0, st.range.begin, st.range.size())));
    EXPECT_TRUE(st.row_steps.equal(saved_t.narrow(0, st.range.begin, st.range.size())));
  });
}

TEST(PartialFcCheckpointTest, LoadRejectsIncompleteOrForeignDirectories) {
  const int64_t K = 10, D = 3;
  PartialFcOptions o = Options(K, D, LossVariant::kMlcd, MarginType::kArc, 16, 0.3);
  auto comm = Collectives::Local();
  auto pfc = MustCreate(o, comm.get());
  testing::TempDir empty;
  EXPECT_EQ(pfc->Load(empty.path()).code(), StatusCode::kNotFound);
  EXPECT_EQ(pfc->Load(empty.Sub("missing")).code(), StatusCode::kNotFound);
  // Only rank 0 of 2 saved: classes [5, 10) are missing.
  testing::TempDir half;
  RunRanks(2, [&](int rank, Collectives& c) {
    auto p = MustCreate(o, &c);
    if (rank == 0) {
      ASSERT_TRUE(p->Save(half.path()).ok());
    }
  });
  Status s = pfc->Load(half.path());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("class 5"), std::string::npos) << s.message();
  // Another number of classes.
  PartialFcOptions other = o;
  other.num_classes = 12;
  auto foreign = MustCreate(other, comm.get());
  testing::TempDir dir;
  ASSERT_TRUE(foreign->Save(dir.path()).ok());
  EXPECT_EQ(pfc->Load(dir.path()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd::worker
