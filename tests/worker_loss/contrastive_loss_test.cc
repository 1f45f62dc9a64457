// The gathered contrastive losses against math: a case worked by hand, a float64 transcription
// of the definitions (docs/loss.md, "Contrastive losses") whose finite differences check the
// gradients, the gathered batch over 3 ranks (real Gloo groups, one thread per rank, unequal
// row counts) equal to one process, and the refusals.
#include "worker/loss/contrastive_loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "tests/worker_loss/run_ranks.h"

namespace mlcd::worker {
namespace {

using Rows = std::vector<std::vector<double>>;
using LabelRows = std::vector<std::vector<int64_t>>;

// The definitions, in float64 and plain loops: L over the whole batch.
double ReferenceLoss(ContrastiveVariant variant, double tau, int views, const Rows& x,
                     const LabelRows& y) {
  const size_t n = x.size();
  Rows z = x;
  for (auto& row : z) {
    double norm = 0;
    for (double v : row) norm += v * v;
    norm = std::max(std::sqrt(norm), 1e-12);
    for (double& v : row) v /= norm;
  }
  auto sim = [&](size_t i, size_t a) {
    double s = 0;
    for (size_t d = 0; d < z[i].size(); ++d) s += z[i][d] * z[a][d];
    return s / tau;
  };
  std::vector<std::set<int64_t>> sets(n);
  for (size_t i = 0; i < n && !y.empty(); ++i)
    for (int64_t label : y[i])
      if (label >= 0) sets[i].insert(label);
  auto partner = [&](size_t i, size_t a) { return views == 2 && a == (i ^ 1u); };
  double total = 0;
  int anchors = 0;
  for (size_t i = 0; i < n; ++i) {
    double denominator = 0;
    for (size_t b = 0; b < n; ++b)
      if (b != i) denominator += std::exp(sim(i, b));
    auto log_p = [&](size_t a) { return sim(i, a) - std::log(denominator); };
    // The mean of -log p over a positive set; false when the set is empty.
    auto mean_over = [&](const std::function<bool(size_t)>& positive, double* out) {
      double sum = 0;
      int count = 0;
      for (size_t a = 0; a < n; ++a) {
        if (a == i || !(positive(a) || partner(i, a))) continue;
        sum -= log_p(a);
        ++count;
      }
      if (count == 0) return false;
      *out = sum / count;
      return true;
    };
    double li = 0;
    bool has = false;
    switch (variant) {
      case ContrastiveVariant::kInfoNce:
        has = mean_over([](size_t) { return false; }, &li);
        break;
      case ContrastiveVariant::kSupConAll:
        has = mean_over([&](size_t a) { return !sets[i].empty() && sets[a] == sets[i]; }, &li);
        break;
      case ContrastiveVariant::kSupConAny:
        has = mean_over(
            [&](size_t a) {
              for (int64_t j : sets[i])
                if (sets[a].count(j)) return true;
              return false;
            },
            &li);
        break;
      case ContrastiveVariant::kMulSupCon: {
        double sum = 0;
        int labels_with_positives = 0;
        for (int64_t j : sets[i]) {
          double lj = 0;
          if (mean_over([&](size_t a) { return sets[a].count(j) > 0; }, &lj)) {
            sum += lj;
            ++labels_with_positives;
          }
        }
        has = labels_with_positives > 0;
        if (has) li = sum / labels_with_positives;
        break;
      }
    }
    if (has) {
      total += li;
      ++anchors;
    }
  }
  return anchors > 0 ? total / anchors : 0.0;
}

at::Tensor ToTensor(const Rows& x) {
  at::Tensor t =
      at::empty({static_cast<int64_t>(x.size()), static_cast<int64_t>(x[0].size())}, at::kDouble);
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t d = 0; d < x[i].size(); ++d) t[i][d] = x[i][d];
  return t;
}

at::Tensor ToTensor(const LabelRows& y) {
  at::Tensor t =
      at::empty({static_cast<int64_t>(y.size()), static_cast<int64_t>(y[0].size())}, at::kLong);
  for (size_t i = 0; i < y.size(); ++i)
    for (size_t j = 0; j < y[i].size(); ++j) t[i][j] = y[i][j];
  return t;
}

Rows RandomRows(int n, int d, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor t = at::randn({n, d}, gen, at::kDouble);
  Rows x(n, std::vector<double>(d));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) x[i][j] = t[i][j].item<double>();
  return x;
}

// Twelve rows (six images of two views): padding, a repeated label, a row without labels, a
// label (9) only one image carries, labels shared by some images, and one image whose label
// set equals another's.
const LabelRows& BatchLabels() {
  static const LabelRows y = {{1, 2, -1},   {1, 2, -1},   {2, -1, -1}, {2, 2, -1},
                              {-1, -1, -1}, {-1, -1, -1}, {1, 3, 9},   {1, 3, 9},
                              {3, -1, -1},  {3, -1, -1},  {2, 1, -1},  {2, 1, -1}};
  return y;
}

StatusOr<ContrastiveStep> RunOne(const ContrastiveOptions& o, const at::Tensor& x,
                                 const at::Tensor& y) {
  auto comm = Collectives::Local();
  return ContrastiveForwardBackward(o, *comm, x, y);
}

const ContrastiveVariant kVariants[] = {
    ContrastiveVariant::kInfoNce, ContrastiveVariant::kMulSupCon, ContrastiveVariant::kSupConAll,
    ContrastiveVariant::kSupConAny};

// Four unit rows at right angles, τ = 1, images (0, 1) and (2, 3): every anchor sees its
// partner at cosine 0 and the other two rows at 0 and -1, so
// L = log(e^0 + e^0 + e^-1) - 0 = log(2 + 1/e).
TEST(ContrastiveLossTest, InfoNceWorkedByHand) {
  ContrastiveOptions o;
  o.variant = ContrastiveVariant::kInfoNce;
  o.temperature = 1.0;
  const Rows x = {{1, 0}, {0, 1}, {-1, 0}, {0, -1}};
  auto step = RunOne(o, ToTensor(x), at::Tensor());
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_NEAR(step->loss, std::log(2.0 + std::exp(-1.0)), 1e-12);
  EXPECT_EQ(step->stats.global_batch_size, 4);
  EXPECT_EQ(step->stats.anchors_with_positives, 4);
  EXPECT_DOUBLE_EQ(step->stats.mean_positives, 1.0);
}

// Loss equal to the transcription and gradients equal to its central differences, for every
// variant, with one and with two views.
TEST(ContrastiveLossTest, EveryVariantMatchesTheDefinitionAndItsFiniteDifferences) {
  const Rows x = RandomRows(12, 5, 7);
  const LabelRows& y = BatchLabels();
  for (int views : {1, 2}) {
    for (ContrastiveVariant v : kVariants) {
      if (v == ContrastiveVariant::kInfoNce && views == 1) continue;
      SCOPED_TRACE(std::string(ContrastiveVariantName(v)) + ", views " + std::to_string(views));
      ContrastiveOptions o;
      o.variant = v;
      o.temperature = 0.3;
      o.views = views;
      auto step = RunOne(o, ToTensor(x), ToTensor(y));
      ASSERT_TRUE(step.ok()) << step.status().ToString();
      const double reference = ReferenceLoss(v, o.temperature, views, x, y);
      EXPECT_NEAR(step->loss, reference, 1e-12 * std::max(1.0, std::abs(reference)));
      ASSERT_EQ(step->grad_embeddings.scalar_type(), at::kDouble);
      const double h = 1e-6;
      double worst = 0, largest = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        for (size_t d = 0; d < x[i].size(); ++d) {
          Rows plus = x, minus = x;
          plus[i][d] += h;
          minus[i][d] -= h;
          const double fd = (ReferenceLoss(v, o.temperature, views, plus, y) -
                             ReferenceLoss(v, o.temperature, views, minus, y)) /
                            (2 * h);
          const double ours = step->grad_embeddings[i][d].item<double>();
          worst = std::max(worst, std::abs(fd - ours));
          largest = std::max(largest, std::abs(fd));
        }
      }
      EXPECT_GT(largest, 1e-3);
      EXPECT_LT(worst, 1e-7 * std::max(1.0, largest));
    }
  }
}

// Positives counted by hand on BatchLabels with one view. Label sets: rows 0, 1, 10, 11 {1, 2};
// 2, 3 {2}; 4, 5 none; 6, 7 {1, 3, 9}; 8, 9 {3}.
//   supcon-all (equal sets): 3 for rows 0, 1, 10, 11, 1 for rows 2, 3, 6, 7, 8, 9: 18 in all;
//   supcon-any and mulsupcon (a shared label): 7 for rows 0, 1, 10, 11 and 6, 7, 5 for rows 2,
//   3, 3 for rows 8, 9: 58 in all.
// The unlabelled rows 4, 5 have none in every variant, so 10 anchors contribute.
TEST(ContrastiveLossTest, PositivesAreCountedAndAnchorsWithoutThemLeftOut) {
  const Rows x = RandomRows(12, 4, 3);
  for (auto [variant, positives] : {std::pair{ContrastiveVariant::kSupConAll, 18},
                                    std::pair{ContrastiveVariant::kSupConAny, 58},
                                    std::pair{ContrastiveVariant::kMulSupCon, 58}}) {
    SCOPED_TRACE(ContrastiveVariantName(variant));
    ContrastiveOptions o;
    o.views = 1;
    o.variant = variant;
    auto step = RunOne(o, ToTensor(x), ToTensor(BatchLabels()));
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    EXPECT_EQ(step->stats.anchors_with_positives, 10);
    EXPECT_EQ(step->stats.anchors_without_positives, 2);
    EXPECT_DOUBLE_EQ(step->stats.mean_positives, positives / 12.0);
  }
  // Nobody has a positive: the loss and every gradient are 0.
  ContrastiveOptions o;
  o.views = 1;
  o.variant = ContrastiveVariant::kSupConAny;
  auto none = RunOne(o, ToTensor(x), at::full({12, 1}, -1, at::kLong));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->loss, 0.0);
  EXPECT_EQ(none->stats.anchors_with_positives, 0);
  EXPECT_EQ(none->grad_embeddings.abs().max().item<double>(), 0.0);
}

// The gathered batch over 3 ranks with unequal row counts (4, 2, 6; one rank empty in a second
// case) equals one process: loss, statistics and every rank's gradient rows.
TEST(ContrastiveLossTest, ThreeRanksEqualOneProcess) {
  const Rows x = RandomRows(12, 6, 11);
  const at::Tensor X = ToTensor(x).to(at::kFloat), Y = ToTensor(BatchLabels());
  for (const std::vector<int64_t>& split :
       {std::vector<int64_t>{4, 2, 6}, std::vector<int64_t>{6, 0, 6}}) {
    for (ContrastiveVariant v : kVariants) {
      SCOPED_TRACE(ContrastiveVariantName(v));
      ContrastiveOptions o;
      o.variant = v;
      o.temperature = 0.2;
      auto one = RunOne(o, X, Y);
      ASSERT_TRUE(one.ok()) << one.status().ToString();
      std::mutex mu;
      std::vector<at::Tensor> grads(3);
      std::vector<double> losses(3);
      std::vector<ContrastiveStats> stats(3);
      RunRanks(3, [&](int rank, Collectives& comm) {
        int64_t begin = 0;
        for (int r = 0; r < rank; ++r) begin += split[r];
        auto step = ContrastiveForwardBackward(o, comm, X.narrow(0, begin, split[rank]),
                                               Y.narrow(0, begin, split[rank]));
        ASSERT_TRUE(step.ok()) << step.status().ToString();
        std::lock_guard<std::mutex> lock(mu);
        grads[rank] = step->grad_embeddings;
        losses[rank] = step->loss;
        stats[rank] = step->stats;
      });
      if (HasFailure()) return;
      const at::Tensor gathered = at::cat(grads, 0);
      for (int r = 0; r < 3; ++r) {
        EXPECT_NEAR(losses[r], one->loss, 1e-5 * std::abs(one->loss));
        EXPECT_EQ(stats[r].anchors_with_positives, one->stats.anchors_with_positives);
        EXPECT_NEAR(stats[r].mean_positives, one->stats.mean_positives, 1e-12);
      }
      const double scale = one->grad_embeddings.abs().max().item<double>();
      EXPECT_LT((gathered - one->grad_embeddings).abs().max().item<double>(), 1e-5 * scale);
    }
  }
}

TEST(ContrastiveLossTest, BadOptionsAndInputsAreRefusedNamingTheProblem) {
  auto message_of = [](const ContrastiveOptions& o, const at::Tensor& x, const at::Tensor& y) {
    auto step = RunOne(o, x, y);
    EXPECT_FALSE(step.ok());
    if (step.ok()) return std::string();
    EXPECT_EQ(step.status().code(), StatusCode::kInvalidArgument) << step.status().ToString();
    return std::string(step.status().message());
  };
  const at::Tensor x = at::randn({4, 3}, at::kFloat), y = at::zeros({4, 2}, at::kLong);
  ContrastiveOptions o;
  o.temperature = 0;
  EXPECT_NE(message_of(o, x, y).find("temperature"), std::string::npos);
  o = {};
  o.views = 3;
  EXPECT_NE(message_of(o, x, y).find("views"), std::string::npos);
  o = {};
  o.variant = ContrastiveVariant::kInfoNce;
  o.views = 1;
  EXPECT_NE(message_of(o, x, y).find("infonce"), std::string::npos);
  o = {};
  EXPECT_NE(
      message_of(o, at::randn({3, 3}, at::kFloat), at::zeros({3, 2}, at::kLong)).find("pairs"),
      std::string::npos);
  EXPECT_NE(message_of(o, x, at::zeros({2, 2}, at::kLong)).find("one row of labels"),
            std::string::npos);
  EXPECT_NE(message_of(o, x, at::Tensor()).find("needs labels"), std::string::npos);
  EXPECT_NE(message_of(o, at::randn({4}, at::kFloat), y).find("2-d"), std::string::npos);
  EXPECT_NE(message_of(o, at::full({4, 3}, NAN, at::kFloat), y).find("not finite"),
            std::string::npos);

  // A dimension that differs between ranks: every rank refuses, none hangs.
  std::mutex mu;
  int refused = 0;
  RunRanks(3, [&](int rank, Collectives& comm) {
    auto step = ContrastiveForwardBackward({}, comm, at::randn({2, rank == 1 ? 4 : 3}),
                                           at::zeros({2, 1}, at::kLong));
    std::lock_guard<std::mutex> lock(mu);
    if (!step.ok() && step.status().code() == StatusCode::kInvalidArgument &&
        std::string(step.status().message()).find("differs between ranks") != std::string::npos)
      ++refused;
  });
  EXPECT_EQ(refused, 3);
}

}  // namespace
}  // namespace mlcd::worker
