// The multi-label protocol against math: every metric against the float64 NumPy oracle
// tests/eval/multilabel_oracle.py (ties in the scores, a label with no positive in the split,
// a sample with no label), hand-worked values, the one-vs-rest probe's logits against Newton's
// method in NumPy, and per-attribute probes that find the attribute the features carry.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include "common/npy.h"
#include "tests/testing/process.h"
#include "worker/eval/attribute_probes.h"
#include "worker/eval/multilabel_metrics.h"
#include "worker/eval/multilabel_probe.h"

namespace mlcd::worker {
namespace {

using testing::RunCommand;
using testing::TempDir;

void WriteCase(const TempDir& dir, const std::string& name, const std::vector<double>& logits,
               const LabelMatrix& y) {
  ASSERT_TRUE(
      WriteNpy(dir.Sub(name + ".logits.npy"), NpyDtype::kFloat64, {y.rows, y.cols}, logits.data())
          .ok());
  ASSERT_TRUE(
      WriteNpy(dir.Sub(name + ".targets.npy"), NpyDtype::kUint8, {y.rows, y.cols}, y.values.data())
          .ok());
}

void RunOracle(const TempDir& dir) {
  std::string out;
  ASSERT_EQ(
      RunCommand("/usr/bin/python3",
                 {std::string(MLCD_SOURCE_DIR) + "/tests/eval/multilabel_oracle.py", dir.path()},
                 &out),
      0)
      << out;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void ExpectEqualsOracle(const MultiLabelScores& s, const nlohmann::json& o,
                        const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_NEAR(s.mean_average_precision, o["mean_average_precision"].get<double>(), 1e-12);
  EXPECT_NEAR(s.hamming_accuracy, o["hamming_accuracy"].get<double>(), 1e-12);
  EXPECT_NEAR(s.example_f1, o["example_f1"].get<double>(), 1e-12);
  EXPECT_NEAR(s.macro_f1, o["macro_f1"].get<double>(), 1e-12);
  EXPECT_NEAR(s.micro_f1, o["micro_f1"].get<double>(), 1e-12);
  EXPECT_NEAR(s.precision_at_1, o["precision_at_1"].get<double>(), 1e-12);
  EXPECT_EQ(s.labels_scored, o["labels_scored"].get<int>());
}

// n x L targets with density `p`, label `empty_label` never set (-1: none), and sample 0
// without labels; logits correlated with the targets, rounded to `step` (0: not) for ties.
void MakeCase(int64_t n, int L, double p, int empty_label, double step, uint64_t seed,
              std::vector<double>* logits, LabelMatrix* y) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution bit(p);
  std::normal_distribution<double> g(0, 1);
  *y = LabelMatrix(n, L);
  logits->assign(static_cast<size_t>(n * L), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < L; ++j) {
      const bool on = i > 0 && j != empty_label && bit(rng);
      if (on) y->set(i, j);
      double s = (on ? 0.8 : -0.8) + g(rng);
      if (step > 0) s = step * std::round(s / step);
      (*logits)[i * L + j] = s;
    }
}

TEST(MultiLabelMetricsTest, EqualNumPyOracle) {
  TempDir dir;
  struct Case {
    std::string name;
    MultiLabelScores scores;
  };
  std::vector<Case> cases;
  auto add = [&](const std::string& name, const std::vector<double>& logits, const LabelMatrix& y) {
    WriteCase(dir, name, logits, y);
    auto s = ScoreMultiLabel(logits, y);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    cases.push_back({name, *s});
  };
  std::vector<double> logits;
  LabelMatrix y;
  MakeCase(30, 5, 0.35, 3, 0, 1, &logits, &y);
  add("continuous", logits, y);
  MakeCase(40, 6, 0.3, 2, 0.5, 2, &logits, &y);  // many ties, one label without positives
  add("ties", logits, y);
  MakeCase(25, 4, 0.5, -1, 1.0, 3, &logits, &y);  // coarse ties, ties for the top score
  add("coarse", logits, y);
  MakeCase(20, 3, 0.4, -1, 0, 4, &logits, &y);
  for (int64_t i = 0; i < 20; ++i) logits[i * 3 + 1] = 0.25;  // a label scored constant
  add("constant", logits, y);
  RunOracle(dir);
  for (const Case& c : cases)
    ExpectEqualsOracle(c.scores, ReadJson(dir.Sub(c.name + ".oracle.json")), c.name);
  EXPECT_EQ(cases[1].scores.labels_scored, 5);  // the empty label is left out of mAP
}

TEST(MultiLabelMetricsTest, HandWorkedValues) {
  // Label 0: scores (1, 1, 0, 0), positives 0 and 2. Sample 0's positive ties with a negative:
  // precision 1/2; sample 2 sees 2 positives among 4: 1/2. AP = 0.5, whatever the tie order.
  LabelMatrix y(4, 2);
  y.set(0, 0);
  y.set(2, 0);
  y.set(1, 1);
  std::vector<double> s = {1, 1, 1, 1, 0, -1, 0, -1};
  EXPECT_DOUBLE_EQ(AveragePrecision(s.data(), y.values.data(), 4, 2), 0.5);
  auto m = ScoreMultiLabel(s, y);
  ASSERT_TRUE(m.ok());
  // Label 1: scores (1, 1, -1, -1), its positive (sample 1) ties with sample 0: AP 1/2.
  EXPECT_DOUBLE_EQ(m->mean_average_precision, 0.5);
  // Predictions (s > 0): samples 0 and 1 predict {0, 1}; samples 2, 3 predict nothing.
  // Errors: (0,1), (1,0), (2,0) of 8 -> Hamming accuracy 5/8.
  EXPECT_DOUBLE_EQ(m->hamming_accuracy, 5.0 / 8);
  // Example-F1: 2/3, 2/3, 0, and 1 for sample 3 (nothing to find, nothing predicted).
  EXPECT_DOUBLE_EQ(m->example_f1, (2.0 / 3 + 2.0 / 3 + 0 + 1) / 4);
  // Precision@1 over samples 0..2 (sample 3 has no label); ties at the top go to label 0:
  // sample 0 right, sample 1 wrong (label 0), sample 2 right (0 > -1).
  EXPECT_DOUBLE_EQ(m->precision_at_1, 2.0 / 3);
  EXPECT_EQ(m->samples_with_labels, 3);
  // Micro: tp 2, fp 2, fn 1 -> 4/7. Macro: label 0 (tp 1, fp 1, fn 1) 1/2, label 1 (tp 1,
  // fp 1) 2/3.
  EXPECT_DOUBLE_EQ(m->micro_f1, 4.0 / 7);
  EXPECT_DOUBLE_EQ(m->macro_f1, (0.5 + 2.0 / 3) / 2);
}

TEST(MultiLabelMetricsTest, PerfectScoresAndBadInput) {
  std::vector<double> logits;
  LabelMatrix y;
  MakeCase(12, 3, 0.5, -1, 0, 5, &logits, &y);
  for (size_t k = 0; k < logits.size(); ++k) logits[k] = y.values[k] ? 2.0 : -2.0;
  auto m = ScoreMultiLabel(logits, y);
  ASSERT_TRUE(m.ok());
  for (double v : {m->mean_average_precision, m->hamming_accuracy, m->example_f1, m->macro_f1,
                   m->micro_f1, m->precision_at_1})
    EXPECT_DOUBLE_EQ(v, 1.0);
  logits.pop_back();
  EXPECT_EQ(ScoreMultiLabel(logits, y).status().code(), StatusCode::kInvalidArgument);
  auto bad = LabelMatrixFromSets(3, {0, 1, 3}, {2, 0, 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("label 3, outside [0, 3)"), std::string::npos)
      << bad.status().ToString();
  auto good = LabelMatrixFromSets(3, {0, 1, 1, 3}, {2, 0, 1});
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->values, (std::vector<uint8_t>{0, 0, 1, 0, 0, 0, 1, 1, 0}));
}

// Features that carry the labels linearly: x = Σ_j y_j·c_j + noise.
void MakeMultiLabelFeatures(int64_t n, int64_t d, int L, double noise, uint64_t seed,
                            FeatureMatrix* x, LabelMatrix* y) {
  std::mt19937_64 rng(seed), crng(99);
  std::normal_distribution<double> g(0, 1);
  std::vector<std::vector<double>> c(L, std::vector<double>(d));
  for (auto& row : c)
    for (double& v : row) v = g(crng);
  std::bernoulli_distribution bit(0.4);
  *x = FeatureMatrix(n, d);
  *y = LabelMatrix(n, L);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < L; ++j)
      if (bit(rng)) y->set(i, j);
    for (int64_t k = 0; k < d; ++k) {
      double v = 0.3 + noise * g(rng);
      for (int j = 0; j < L; ++j) v += y->at(i, j) * c[j][k];
      x->row(i)[k] = static_cast<float>(v);
    }
  }
}

TEST(MultiLabelProbeTest, FixedLambdaLogitsEqualNewtonInNumPy) {
  FeatureMatrix train, test;
  LabelMatrix ytrain, ytest;
  MakeMultiLabelFeatures(48, 6, 3, 1.5, 11, &train, &ytrain);
  MakeMultiLabelFeatures(20, 6, 3, 1.5, 12, &test, &ytest);
  MultiLabelProbeOptions o;
  o.probe.fixed_lambda = 0.5;
  o.probe.solver.gradient_tolerance = 1e-9;
  o.probe.solver.function_tolerance = 0;
  auto r = RunMultiLabelProbe(train, ytrain, test, ytest, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  TempDir dir;
  std::vector<double> x64(train.values.begin(), train.values.end()),
      t64(test.values.begin(), test.values.end());
  ASSERT_TRUE(WriteNpy(dir.Sub("probe.train_x.npy"), NpyDtype::kFloat64, {48, 6}, x64.data()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("probe.test_x.npy"), NpyDtype::kFloat64, {20, 6}, t64.data()).ok());
  ASSERT_TRUE(
      WriteNpy(dir.Sub("probe.train_y.npy"), NpyDtype::kUint8, {48, 3}, ytrain.values.data()).ok());
  std::ofstream(dir.Sub("probe.json")) << "{\"lambda\": 0.5}";
  RunOracle(dir);
  std::vector<int64_t> shape;
  auto oracle = ReadNpyAsFloat32(dir.Sub("probe.oracle_logits.npy"), &shape);
  ASSERT_TRUE(oracle.ok());
  ASSERT_EQ(shape, (std::vector<int64_t>{20, 3}));
  for (size_t k = 0; k < oracle->size(); ++k)
    EXPECT_NEAR(r->test_logits[k], (*oracle)[k],
                2e-3 * std::max(1.0, std::abs(double{(*oracle)[k]})))
        << "entry " << k;
  EXPECT_EQ(r->lambdas, (std::vector<double>{0.5, 0.5, 0.5}));
}

TEST(MultiLabelProbeTest, SearchFindsTheLabelsAndNoiseDoesNot) {
  FeatureMatrix train, test, noise_train, noise_test;
  LabelMatrix ytrain, ytest, unused;
  MakeMultiLabelFeatures(80, 8, 4, 0.3, 21, &train, &ytrain);
  MakeMultiLabelFeatures(40, 8, 4, 0.3, 22, &test, &ytest);
  MultiLabelProbeOptions o;
  auto r = RunMultiLabelProbe(train, ytrain, test, ytest, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->scores.mean_average_precision, 0.95);
  EXPECT_GT(r->scores.example_f1, 0.9);
  EXPECT_EQ(r->lambdas.size(), 4u);
  // The same labels on features that do not carry them.
  MakeMultiLabelFeatures(80, 8, 4, 0.3, 23, &noise_train, &unused);
  MakeMultiLabelFeatures(40, 8, 4, 0.3, 24, &noise_test, &unused);
  auto chance = RunMultiLabelProbe(noise_train, ytrain, noise_test, ytest, o);
  ASSERT_TRUE(chance.ok());
  EXPECT_LT(chance->scores.mean_average_precision, 0.75);
  LabelMatrix wrong(test.rows, 5);
  EXPECT_EQ(RunMultiLabelProbe(train, ytrain, test, wrong, o).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(AttributeProbesTest, ProbeFindsTheAttributeTheFeaturesCarry) {
  // Attribute "shape" (3 classes) decides the features; "colour" (2 classes) is independent.
  auto make = [](int64_t n, uint64_t seed, FeatureMatrix* x, std::vector<int64_t>* shape,
                 std::vector<int64_t>* colour) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> g(0, 0.3);
    *x = FeatureMatrix(n, 4);
    for (int64_t i = 0; i < n; ++i) {
      shape->push_back(static_cast<int64_t>(rng() % 3));
      colour->push_back(static_cast<int64_t>(rng() % 2));
      for (int k = 0; k < 4; ++k)
        x->row(i)[k] = static_cast<float>((k == shape->back() ? 2.0 : 0.0) + 0.5 + g(rng));
    }
  };
  FeatureMatrix train, test;
  AttributeLabels shape{"shape", 3, {}, {}}, colour{"colour", 2, {}, {}};
  make(60, 31, &train, &shape.train, &colour.train);
  make(30, 32, &test, &shape.test, &colour.test);
  auto r = RunAttributeProbes(train, test, {shape, colour}, LinearProbeOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "shape");
  EXPECT_GT((*r)[0].probe.test_accuracy, 0.95);
  EXPECT_EQ((*r)[1].name, "colour");
  EXPECT_LT((*r)[1].probe.test_accuracy, 0.8);
  colour.test[3] = 7;
  auto bad = RunAttributeProbes(train, test, {shape, colour}, LinearProbeOptions{});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().ToString().find("attribute colour"), std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace mlcd::worker
