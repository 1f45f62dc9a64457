// MCL's spec checks (common/spec_validation.h: the mcl section, the paper's Eq. 4) and the
// adjusted mutual information between stage clusterings (common/adjusted_mutual_info.h)
// against a by-hand case and a float64 NumPy oracle written below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/adjusted_mutual_info.h"
#include "common/job_spec.h"
#include "common/random.h"
#include "common/spec_defaults.h"
#include "common/spec_validation.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

// ---------------------------------------------------------------------------------------
// Adjusted mutual information.

TEST(AdjustedMutualInfo, ByHand) {
  // Identical clusterings (up to renaming): 1.
  auto same = AdjustedMutualInfo({0, 0, 1, 1, 2}, {5, 5, 3, 3, 9});
  ASSERT_TRUE(same.ok());
  EXPECT_NEAR(*same, 1.0, 1e-12);
  // N = 4, two clusters of 2 on each side, crossed: MI = 0; E[MI] = 4 cells x P(n_ij = 2)
  // (1/6) x (2/4) ln(4 * 2 / 4) = ln(2) / 3; H = ln 2; AMI = (0 - ln2/3) / (ln2 - ln2/3).
  auto crossed = AdjustedMutualInfo({0, 0, 1, 1}, {0, 1, 0, 1});
  ASSERT_TRUE(crossed.ok());
  EXPECT_NEAR(*crossed, -0.5, 1e-12);
  // One cluster on both sides: the same clustering.
  auto single = AdjustedMutualInfo({3, 3, 3}, {1, 1, 1});
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(*single, 1.0);
}

TEST(AdjustedMutualInfo, RefusesMismatchedOrMissingLabels) {
  EXPECT_EQ(AdjustedMutualInfo({0, 1}, {0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AdjustedMutualInfo({}, {}).status().code(), StatusCode::kInvalidArgument);
  auto missing = AdjustedMutualInfo({0, -1}, {0, 1});
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("sample 1"), std::string::npos);
}

// The oracle: contingency table with NumPy, E[MI] from the hypergeometric probabilities as
// exact integer binomials (math.comb) rather than log-gamma, all in float64.
const char* kOracle = R"(
import math, sys
import numpy as np
u = np.array([int(x) for x in sys.argv[1].split(',')])
v = np.array([int(x) for x in sys.argv[2].split(',')])
n = len(u)
_, ui = np.unique(u, return_inverse=True)
_, vi = np.unique(v, return_inverse=True)
t = np.zeros((ui.max() + 1, vi.max() + 1), dtype=np.float64)
np.add.at(t, (ui, vi), 1.0)
a = t.sum(axis=1); b = t.sum(axis=0)
nz = t > 0
mi = float(np.sum(t[nz] / n * np.log(n * t[nz] / np.outer(a, b)[nz])))
emi = 0.0
for ai in a.astype(int):
    for bj in b.astype(int):
        for k in range(max(1, ai + bj - n), min(ai, bj) + 1):
            p = math.comb(bj, k) * math.comb(n - bj, ai - k) / math.comb(n, ai)
            emi += k / n * math.log(n * k / (ai * bj)) * p
h = lambda s: float(-np.sum(s / n * np.log(s / n)))
print(repr((mi - emi) / (0.5 * (h(a) + h(b)) - emi)))
)";

std::string Join(const std::vector<int64_t>& x) {
  std::string s;
  for (size_t i = 0; i < x.size(); ++i) s += (i ? "," : "") + std::to_string(x[i]);
  return s;
}

TEST(AdjustedMutualInfo, MatchesNumPyOracle) {
  SplitMix rng(7);
  struct Case {
    int n, ku, kv;
    double agree;  // the fraction of samples whose v copies u
  };
  for (const Case& c :
       {Case{60, 3, 4, 0.0}, Case{200, 5, 5, 0.6}, Case{150, 10, 2, 0.3}, Case{97, 7, 7, 1.0}}) {
    std::vector<int64_t> u(c.n), v(c.n);
    for (int i = 0; i < c.n; ++i) {
      u[i] = static_cast<int64_t>(rng.Below(c.ku));
      const bool copy = static_cast<double>(rng.Below(1000)) < 1000 * c.agree;
      v[i] = copy ? u[i] % c.kv : static_cast<int64_t>(rng.Below(c.kv));
    }
    auto ami = AdjustedMutualInfo(u, v);
    ASSERT_TRUE(ami.ok()) << ami.status().ToString();
    std::string out;
    const int rc = testing::RunCommand("/usr/bin/python3", {"-c", kOracle, Join(u), Join(v)}, &out);
    ASSERT_EQ(rc, 0) << out;
    const double oracle = std::strtod(out.c_str(), nullptr);
    EXPECT_NEAR(*ami, oracle, 1e-9) << "n " << c.n << " ku " << c.ku << " kv " << c.kv;
  }
}

// ---------------------------------------------------------------------------------------
// The mcl section of a job spec.

const char* kMcl = R"(apiVersion: mlcd/v1
kind: TrainingJob
metadata: {name: mcl}
spec:
  dataset: {limit: 2000}
  loss: {variant: infonce}
  clustering: {k: 4}
  training: {batch_size: 50}
  mcl: {stages: 2}
)";

// The problems of the spec under the mcl section and training.rounds (the loss section's own
// problems belong to the loss's tests).
std::vector<std::string> MclProblems(const v1::JobSpec& spec) {
  std::vector<std::string> out;
  for (const SpecProblem& p : JobSpecProblems(spec)) {
    if (p.path.rfind("spec.mcl", 0) == 0 || p.path.rfind("spec.training.rounds", 0) == 0)
      out.push_back(p.ToString());
  }
  return out;
}

v1::JobSpec Defaulted(const std::string& yaml) {
  auto parsed = ParseJobSpecYaml(yaml);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  v1::JobSpec spec = parsed->spec;
  ApplyJobSpecDefaults(&spec);
  return spec;
}

bool Has(const std::vector<std::string>& problems, const std::string& text) {
  for (const auto& p : problems) {
    if (p.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(MclSpec, DefaultsMakeAValidJob) {
  const v1::JobSpec spec = Defaulted(kMcl);
  EXPECT_EQ(spec.mcl().stages(), 2);
  EXPECT_EQ(spec.mcl().stage_init(), "scratch");
  EXPECT_EQ(spec.training().rounds(), 2);
  EXPECT_EQ(spec.clustering().l(), 1);
  EXPECT_EQ(spec.clustering().features().kind(), "model");
  EXPECT_TRUE(MclProblems(spec).empty()) << MclProblems(spec)[0];
  // Without k: 10 clusters per stage.
  v1::JobSpec no_k = Defaulted(std::string(kMcl).replace(std::string(kMcl).find("k: 4"), 4, ""));
  EXPECT_EQ(no_k.clustering().k(), 10);
}

TEST(MclSpec, EquationFourNamesTheNumbers) {
  // 4^3 = 64 > 2000 / 50 = 40.
  v1::JobSpec spec = Defaulted(kMcl);
  spec.mutable_mcl()->set_stages(3);
  spec.mutable_training()->set_rounds(3);
  const auto problems = MclProblems(spec);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(Has(problems,
                  "spec.mcl.stages: K^N = clustering.k^stages = 4^3 = 64 > M / b = "
                  "2000 samples / batch_size 50 = 40"))
      << problems[0];
  // 4^2 = 16 <= 40 holds; so does exactly M / b (2000 / 125 = 16).
  spec = Defaulted(kMcl);
  spec.mutable_training()->set_batch_size(125);
  EXPECT_TRUE(MclProblems(spec).empty());
  spec.mutable_training()->set_batch_size(126);
  EXPECT_EQ(MclProblems(spec).size(), 1u);
  // A huge K^N saturates instead of overflowing.
  spec = Defaulted(kMcl);
  spec.mutable_clustering()->set_k(1 << 20);
  spec.mutable_mcl()->set_stages(16);
  spec.mutable_training()->set_rounds(16);
  EXPECT_TRUE(Has(MclProblems(spec), "= more than 2000 > M / b")) << MclProblems(spec)[0];
  // An unknown training size (an image folder before its index is read) is checked at submit.
  EXPECT_TRUE(MclClusterBudgetProblems(spec, 0).empty());
  EXPECT_EQ(MclClusterBudgetProblems(spec, 5000).size(), 1u);
}

TEST(MclSpec, RefusesWhatMclDecidesItself) {
  v1::JobSpec spec = Defaulted(kMcl);
  spec.mutable_loss()->set_variant("mlcd");
  spec.mutable_training()->set_rounds(3);
  spec.mutable_clustering()->set_l(2);
  spec.mutable_clustering()->set_label_set("mine/tags");
  spec.mutable_clustering()->mutable_features()->set_kind("pixels");
  spec.mutable_mcl()->set_stage_init("warm");
  const auto problems = MclProblems(spec);
  EXPECT_TRUE(Has(problems, "loss.variant is 'mlcd'; set loss.variant: infonce"));
  EXPECT_TRUE(Has(problems, "2 stages, but training.rounds is 3"));
  EXPECT_TRUE(Has(problems, "clustering.l is 2"));
  EXPECT_TRUE(Has(problems, "clustering.label_set 'mine/tags' cannot be used"));
  EXPECT_TRUE(Has(problems, "clustering.features.kind is 'pixels'"));
  EXPECT_TRUE(Has(problems, "spec.mcl.stage_init: 'warm' is not one of: scratch, previous"));
  spec = Defaulted(kMcl);
  spec.mutable_mcl()->set_stages(kMaxMclStages + 1);
  spec.mutable_training()->set_rounds(kMaxMclStages + 1);
  EXPECT_TRUE(Has(MclProblems(spec), "spec.mcl.stages: 17 is not in [1, 16]"));
}

TEST(MclSpec, PlainInfoNceTrainsOneRound) {
  v1::JobSpec spec = Defaulted(kMcl);
  spec.clear_mcl();
  spec.mutable_training()->set_rounds(1);
  EXPECT_TRUE(MclProblems(spec).empty()) << MclProblems(spec)[0];
  spec.mutable_training()->set_rounds(2);
  EXPECT_TRUE(Has(MclProblems(spec), "spec.training.rounds: 2 rounds of loss.variant infonce"));
}

}  // namespace
}  // namespace mlcd
