// kNN classification against a brute-force computation written here: every similarity in
// double, a full sort, the weighted vote by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "worker/eval/knn.h"

namespace mlcd::worker {
namespace {

FeatureMatrix RandomMatrix(int64_t n, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  FeatureMatrix m(n, d);
  for (float& v : m.values) v = g(rng);
  return m;
}

std::vector<int64_t> BruteForce(const FeatureMatrix& train, const std::vector<int64_t>& ytr,
                                const FeatureMatrix& q, int k, double temperature, int classes) {
  auto norm = [](const float* r, int64_t d) {
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += static_cast<double>(r[j]) * r[j];
    return std::sqrt(s);
  };
  std::vector<int64_t> out;
  for (int64_t i = 0; i < q.rows; ++i) {
    std::vector<std::pair<double, int64_t>> sims;
    double qn = norm(q.row(i), q.cols);
    for (int64_t t = 0; t < train.rows; ++t) {
      double dot = 0;
      for (int64_t j = 0; j < q.cols; ++j)
        dot += static_cast<double>(q.row(i)[j]) * train.row(t)[j];
      sims.emplace_back(dot / (qn * norm(train.row(t), train.cols)), t);
    }
    std::sort(sims.begin(), sims.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::vector<double> votes(classes, 0.0);
    for (int j = 0; j < k && j < static_cast<int>(sims.size()); ++j)
      votes[ytr[sims[j].second]] += std::exp(sims[j].first / temperature);
    out.push_back(std::max_element(votes.begin(), votes.end()) - votes.begin());
  }
  return out;
}

TEST(KnnTest, AgreesWithBruteForce) {
  // Clustered data so the vote is informative, with small blocks so several train blocks and
  // the running top-k merge are exercised.
  const int classes = 6;
  const int64_t d = 24;
  FeatureMatrix centres = RandomMatrix(classes, d, 99);
  auto make = [&](int64_t n, uint64_t seed, FeatureMatrix* x, std::vector<int64_t>* y) {
    *x = RandomMatrix(n, d, seed);
    y->resize(n);
    for (int64_t i = 0; i < n; ++i) {
      (*y)[i] = static_cast<int64_t>(i % classes);
      for (int64_t j = 0; j < d; ++j) x->row(i)[j] = 1.2f * centres.row((*y)[i])[j] + x->row(i)[j];
    }
  };
  FeatureMatrix train, queries;
  std::vector<int64_t> ytr, yq;
  make(700, 1, &train, &ytr);
  make(150, 2, &queries, &yq);
  for (double temperature : {0.07, 0.5}) {
    KnnOptions o;
    o.temperature = temperature;
    o.query_block_rows = 37;
    o.train_block_rows = 101;
    auto r = KnnClassify(train, ytr, queries, yq, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::vector<int64_t> expected = BruteForce(train, ytr, queries, 20, temperature, classes);
    EXPECT_EQ(r->predictions, expected) << "temperature " << temperature;
    int64_t correct = 0;
    for (size_t i = 0; i < yq.size(); ++i) correct += expected[i] == yq[i];
    EXPECT_DOUBLE_EQ(r->accuracy, static_cast<double>(correct) / yq.size());
    EXPECT_EQ(r->k, 20);
  }
  // One block each way gives the same answer.
  KnnOptions big;
  auto a = KnnClassify(train, ytr, queries, yq, big);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->predictions, BruteForce(train, ytr, queries, 20, 0.07, classes));
}

TEST(KnnTest, HandWorkedVote) {
  // Query (1, 0). Neighbours: (1, 0) class 0 (cos 1), (0.8, 0.6) class 1 (cos 0.8),
  // (0.6, 0.8) class 1 (cos 0.6), (-1, 0) class 0 (cos -1). k = 3, T = 1:
  // class 0: e^1 = 2.718; class 1: e^0.8 + e^0.6 = 2.226 + 1.822 = 4.048 -> class 1.
  // With T = 0.07 the closest neighbour dominates -> class 0.
  FeatureMatrix train(4, 2);
  train.values = {1, 0, 0.8f, 0.6f, 0.6f, 0.8f, -1, 0};
  std::vector<int64_t> y = {0, 1, 1, 0};
  FeatureMatrix q(1, 2);
  q.values = {1, 0};
  KnnOptions o;
  o.k = 3;
  o.temperature = 1.0;
  auto r = KnnClassify(train, y, q, {1}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->predictions[0], 1);
  EXPECT_EQ(r->accuracy, 1.0);
  o.temperature = 0.07;
  r = KnnClassify(train, y, q, {1}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->predictions[0], 0);
  EXPECT_EQ(r->accuracy, 0.0);
  // k larger than the training set is clamped.
  o.k = 50;
  r = KnnClassify(train, y, q, {}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->k, 4);
}

TEST(KnnTest, RejectsBadInput) {
  FeatureMatrix train(3, 2), q(1, 3);
  KnnOptions o;
  EXPECT_EQ(KnnClassify(train, {0, 1, 0}, q, {}, o).status().code(), StatusCode::kInvalidArgument);
  FeatureMatrix q2(1, 2);
  EXPECT_EQ(KnnClassify(train, {0, 1}, q2, {}, o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KnnClassify(train, {0, 1, -2}, q2, {}, o).status().code(),
            StatusCode::kInvalidArgument);
  o.k = 0;
  EXPECT_EQ(KnnClassify(train, {0, 1, 0}, q2, {}, o).status().code(), StatusCode::kInvalidArgument);
  o.k = 1;
  o.temperature = 0;
  EXPECT_EQ(KnnClassify(train, {0, 1, 0}, q2, {}, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd::worker
