// Top-l assignment: equals brute force computed here, float16 and float32 shards agree,
// approximate methods report the recall brute force measures, the sink sees every row once in
// order, errors and cancels stop the pass.
#include "clusterd/assign.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "clusterd/feature_gen.h"
#include "clusterd/feature_source.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd::clusterd {
namespace {

std::vector<float> RandomUnitRows(int n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(static_cast<size_t>(n) * d);
  for (auto& x : v) x = g(rng);
  NormalizeRows(v.data(), n, d);
  return v;
}

// Top-l by inner product in double precision, best first (ties by lower id).
void BruteForceTopL(const std::vector<float>& x, int64_t n, const std::vector<float>& c, int k,
                    int d, int l, std::vector<int32_t>* labels, std::vector<double>* scores) {
  labels->resize(static_cast<size_t>(n) * l);
  scores->resize(static_cast<size_t>(n) * l);
  std::vector<double> s(k);
  std::vector<int32_t> order(k);
  for (int64_t i = 0; i < n; ++i) {
    double norm = 0;
    for (int j = 0; j < d; ++j) norm += static_cast<double>(x[i * d + j]) * x[i * d + j];
    norm = norm > 0 ? 1 / std::sqrt(norm) : 0;
    for (int a = 0; a < k; ++a) {
      double dot = 0;
      for (int j = 0; j < d; ++j) dot += static_cast<double>(x[i * d + j]) * c[a * d + j];
      s[a] = dot * norm;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + l, order.end(),
                      [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    for (int j = 0; j < l; ++j) {
      (*labels)[i * l + j] = order[j];
      (*scores)[i * l + j] = s[order[j]];
    }
  }
}

struct Collected {
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  std::vector<float> scores;
  std::vector<int64_t> first_rows;
};

LabelBatchSink Collect(Collected* out) {
  return [out](int64_t first_row, LabelBatch b) {
    out->first_rows.push_back(first_row);
    out->ids.insert(out->ids.end(), b.sample_ids.begin(), b.sample_ids.end());
    out->labels.insert(out->labels.end(), b.labels.begin(), b.labels.end());
    out->scores.insert(out->scores.end(), b.scores.begin(), b.scores.end());
    return Status::Ok();
  };
}

class AssignTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Three shards of uneven size, unnormalised rows (the reader normalises).
    x_ = RandomUnitRows(kN, kD, 1);
    for (int64_t i = 0; i < kN; ++i)
      for (int j = 0; j < kD; ++j) x_[i * kD + j] *= 0.5f + static_cast<float>(i % 7);
    int64_t cut[] = {0, 700, 1900, kN};
    for (int s = 0; s < 3; ++s) {
      std::string p = dir_.Sub("s" + std::to_string(s) + ".npy");
      ASSERT_TRUE(
          WriteNpy(p, NpyDtype::kFloat32, {cut[s + 1] - cut[s], kD}, x_.data() + cut[s] * kD).ok());
      paths_.push_back(p);
    }
    c_ = RandomUnitRows(kK, kD, 2);
  }

  static constexpr int64_t kN = 3000;
  static constexpr int kD = 24;
  static constexpr int kK = 60;
  testing::TempDir dir_;
  std::vector<std::string> paths_;
  std::vector<float> x_, c_;
};

TEST_F(AssignTest, ExactEqualsBruteForce) {
  auto shards = FeatureShards::Open(paths_);
  ASSERT_TRUE(shards.ok());
  AssignParams p;
  p.l = 5;
  p.chunk_rows = 512;  // chunks straddle shard boundaries
  Collected got;
  int64_t last_done = 0;
  AssignCallbacks cb;
  cb.on_progress = [&](int64_t done, int64_t total) {
    EXPECT_GT(done, last_done);
    EXPECT_EQ(total, kN);
    last_done = done;
  };
  auto stats = AssignTopL(*shards, c_, kK, p, cb, Collect(&got));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(last_done, kN);
  std::vector<int32_t> labels;
  std::vector<double> scores;
  BruteForceTopL(x_, kN, c_, kK, kD, 5, &labels, &scores);
  ASSERT_EQ(got.labels.size(), labels.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    EXPECT_NEAR(got.scores[i], scores[i], 2e-5) << "entry " << i;
    // A different id is only acceptable for a numerical tie: its exact score equals the
    // brute-force score at that rank.
    if (got.labels[i] != labels[i]) {
      ++mismatches;
      const int64_t row = static_cast<int64_t>(i) / 5;
      double norm = 0, dot = 0;
      for (int j = 0; j < kD; ++j) {
        norm += static_cast<double>(x_[row * kD + j]) * x_[row * kD + j];
        dot += static_cast<double>(x_[row * kD + j]) * c_[got.labels[i] * kD + j];
      }
      EXPECT_NEAR(dot / std::sqrt(norm), scores[i], 1e-5);
    }
  }
  EXPECT_LE(mismatches, 2);
  ASSERT_EQ(got.ids.size(), static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(got.ids[i], static_cast<uint64_t>(i));
  // Batches arrive in order.
  for (size_t b = 0; b < got.first_rows.size(); ++b)
    EXPECT_EQ(got.first_rows[b], static_cast<int64_t>(b) * 512);
  // Sizes are the histogram of top-1 labels.
  std::vector<int64_t> sizes(kK, 0);
  for (int64_t i = 0; i < kN; ++i) ++sizes[labels[i * 5]];
  EXPECT_EQ(stats->top1_sizes, sizes);
  EXPECT_EQ(stats->approx_recall, 1.0);
}

TEST_F(AssignTest, Float16AndFloat32ShardsGiveTheSameLabels) {
  // Round the features to float16 first, so both files hold the same numbers.
  std::vector<uint16_t> half(x_.size());
  std::vector<float> rounded(x_.size());
  for (size_t i = 0; i < x_.size(); ++i) {
    half[i] = FloatToHalf(x_[i]);
    rounded[i] = HalfToFloat(half[i]);
  }
  ASSERT_TRUE(WriteNpy(dir_.Sub("h.npy"), NpyDtype::kFloat16, {kN, kD}, half.data()).ok());
  ASSERT_TRUE(WriteNpy(dir_.Sub("f.npy"), NpyDtype::kFloat32, {kN, kD}, rounded.data()).ok());
  auto sh = FeatureShards::Open({dir_.Sub("h.npy")});
  auto sf = FeatureShards::Open({dir_.Sub("f.npy")});
  ASSERT_TRUE(sh.ok() && sf.ok());
  AssignParams p;
  p.l = 8;
  Collected gh, gf;
  ASSERT_TRUE(AssignTopL(*sh, c_, kK, p, {}, Collect(&gh)).ok());
  ASSERT_TRUE(AssignTopL(*sf, c_, kK, p, {}, Collect(&gf)).ok());
  EXPECT_EQ(gh.labels, gf.labels);
  EXPECT_EQ(gh.scores, gf.scores);
  // And the float16 labels are nearly those of the unrounded float32 features.
  Collected g32;
  auto s32 = FeatureShards::Open(paths_);
  ASSERT_TRUE(AssignTopL(*s32, c_, kK, p, {}, Collect(&g32)).ok());
  int64_t same_top1 = 0;
  for (int64_t i = 0; i < kN; ++i) same_top1 += g32.labels[i * 8] == gh.labels[i * 8];
  EXPECT_GT(same_top1, kN * 99 / 100);
}

TEST_F(AssignTest, ApproximateMethodsReportTheirRecall) {
  auto shards = FeatureShards::Open(paths_);
  ASSERT_TRUE(shards.ok());
  std::vector<int32_t> exact;
  std::vector<double> scores;
  BruteForceTopL(x_, kN, c_, kK, kD, 4, &exact, &scores);
  for (SearchMethod m : {SearchMethod::kHnsw, SearchMethod::kIvf}) {
    AssignParams p;
    p.l = 4;
    p.method = m;
    p.recall_sample = kN;  // the whole input: the reported recall must equal the true one
    if (m == SearchMethod::kIvf) p.search_effort = 3;
    Collected got;
    std::vector<std::string> notes;
    AssignCallbacks cb;
    cb.on_note = [&](const std::string& n) { notes.push_back(n); };
    auto stats = AssignTopL(*shards, c_, kK, p, cb, Collect(&got));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    int64_t hits = 0;
    for (int64_t i = 0; i < kN; ++i)
      for (int j = 0; j < 4; ++j) {
        const int32_t* e = exact.data() + i * 4;
        hits += std::find(e, e + 4, got.labels[i * 4 + j]) != e + 4;
      }
    double recall = static_cast<double>(hits) / (kN * 4);
    EXPECT_NEAR(stats->approx_recall, recall, 0.002) << SearchMethodName(m);
    EXPECT_EQ(stats->recall_rows, kN);
    EXPECT_GT(recall, m == SearchMethod::kHnsw ? 0.95 : 0.3) << SearchMethodName(m);
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes.front().find("recall@4"), std::string::npos);
    // Every row still has l distinct labels in [0, k).
    for (int64_t i = 0; i < kN; ++i) {
      std::vector<int32_t> row(got.labels.begin() + i * 4, got.labels.begin() + i * 4 + 4);
      for (int32_t v : row) ASSERT_TRUE(v >= 0 && v < kK);
      std::sort(row.begin(), row.end());
      ASSERT_TRUE(std::adjacent_find(row.begin(), row.end()) == row.end());
    }
  }
}

TEST_F(AssignTest, SinkErrorStopsThePass) {
  auto shards = FeatureShards::Open(paths_);
  ASSERT_TRUE(shards.ok());
  AssignParams p;
  p.l = 2;
  p.chunk_rows = 100;
  int calls = 0;
  auto stats = AssignTopL(*shards, c_, kK, p, {}, [&](int64_t, LabelBatch) {
    return ++calls == 3 ? Status::Unavailable("label store went away") : Status::Ok();
  });
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(calls, 3);
}

TEST_F(AssignTest, CancelStopsThePass) {
  auto shards = FeatureShards::Open(paths_);
  ASSERT_TRUE(shards.ok());
  AssignParams p;
  p.l = 2;
  p.chunk_rows = 100;
  int64_t done = 0;
  AssignCallbacks cb;
  cb.on_progress = [&](int64_t d, int64_t) { done = d; };
  cb.should_stop = [&] { return done >= 500; };
  auto stats = AssignTopL(*shards, c_, kK, p, cb, nullptr);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(done, 500);
}

TEST(ClusterSizes, Summary) {
  ClusterSizeSummary s = SummarizeClusterSizes({4, 0, 2, 2});
  EXPECT_EQ(s.min, 0);
  EXPECT_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(2.0));  // (4+4+0+0)/4
  EXPECT_EQ(s.empty_clusters, 1);
  EXPECT_DOUBLE_EQ(s.imbalance_factor, 4.0 * (16 + 4 + 4) / 64.0);
}

}  // namespace
}  // namespace mlcd::clusterd
