// FAISS's rules as the gang engine replays them: the initial rows equal the head of
// faiss::rand_perm, empty clusters are split as FAISS's split_clusters does (worked by hand on
// a small case), the centroid checkpoint round-trips and refuses another run's file, and the
// feature reader refuses files of differing dimensions; a rank's memory estimate, worked by
// hand, and the refusal it gives.
#include <ATen/ATen.h>
#include <faiss/utils/random.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/npy.h"
#include "tests/testing/process.h"
#include "worker/cluster/centroid_checkpoint.h"
#include "worker/cluster/feature_rows.h"
#include "worker/cluster/init_rule.h"
#include "worker/cluster/rank_memory.h"
#include "worker/cluster/split_rule.h"

namespace mlcd::worker::cluster {
namespace {

TEST(InitRule, EqualsTheHeadOfFaissRandPerm) {
  for (int64_t nx : {1, 2, 7, 1000, 25000}) {
    for (int64_t seed : {0, 1234, 99}) {
      std::vector<int> perm(static_cast<size_t>(nx));
      faiss::rand_perm(perm.data(), nx, seed + 1);
      const int k = static_cast<int>(std::min<int64_t>(nx, 300));
      std::vector<int64_t> head = FaissInitialRows(nx, k, seed);
      ASSERT_EQ(head.size(), static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) ASSERT_EQ(head[i], perm[i]) << "nx " << nx << " i " << i;
    }
  }
  EXPECT_EQ(FaissSeed(0xffffffff00001234ull), 0x1234);
}

TEST(SplitRule, SplitsAsFaissDoes) {
  // Counts {0, 9, 1} over n = 10 rows, k = 3: the walk takes cj with probability
  // (count - 1) / (n - k): 0 for cluster 0 (count 0 -> negative), 8/7 for cluster 1 (always),
  // so cluster 1 is split into cluster 0 whatever the draws; counts become {4.5, 4.5, 1}.
  std::vector<float> counts = {0, 9, 1};
  std::vector<ClusterSplit> splits = PlanSplits(counts, 10);
  ASSERT_EQ(splits.size(), 1u);
  EXPECT_EQ(splits[0].empty, 0);
  EXPECT_EQ(splits[0].source, 1);
  EXPECT_EQ(counts, (std::vector<float>{4.5f, 4.5f, 1}));
  at::Tensor means = at::tensor(std::vector<float>{0, 0, 0, 1, 2, 3, 7, 7, 7}).view({3, 3});
  ApplySplits(splits, means);
  const float up = 1 + 1 / 1024.f, down = 1 - 1 / 1024.f;
  EXPECT_TRUE(means[0].equal(at::tensor(std::vector<float>{1 * up, 2 * down, 3 * up})));
  EXPECT_TRUE(means[1].equal(at::tensor(std::vector<float>{1 * down, 2 * up, 3 * down})));
  EXPECT_TRUE(means[2].equal(at::full({3}, 7.0f)));
  // No empty cluster: nothing to do.
  std::vector<float> full = {3, 3, 4};
  EXPECT_TRUE(PlanSplits(full, 10).empty());
}

TEST(SplitRule, ProbabilisticWalkUsesFaissGenerator) {
  // Two empty clusters among counts where the walk depends on the draws: replay FAISS's
  // RandomGenerator(1234) by hand and check the chosen sources.
  std::vector<float> counts = {5, 0, 3, 0, 6};  // n = 14, k = 5: p = (c - 1) / 9
  const int64_t n = 14;
  std::vector<float> expect_counts = counts;
  faiss::RandomGenerator rng(1234);
  std::vector<int64_t> sources;
  for (int64_t ci = 0; ci < 5; ++ci) {
    if (expect_counts[ci] != 0) continue;
    int64_t cj = 0;
    for (;; cj = (cj + 1) % 5) {
      float p = (expect_counts[cj] - 1.0) / 9.0f;
      if (rng.rand_float() < p) break;
    }
    sources.push_back(cj);
    expect_counts[ci] = expect_counts[cj] / 2;
    expect_counts[cj] -= expect_counts[ci];
  }
  std::vector<ClusterSplit> splits = PlanSplits(counts, n);
  ASSERT_EQ(splits.size(), 2u);
  EXPECT_EQ(splits[0].empty, 1);
  EXPECT_EQ(splits[1].empty, 3);
  EXPECT_EQ(splits[0].source, sources[0]);
  EXPECT_EQ(splits[1].source, sources[1]);
  EXPECT_EQ(counts, expect_counts);
}

TEST(CentroidCheckpoint, RoundTripsAndRefusesAnotherRun) {
  testing::TempDir dir;
  const std::string path = dir.Sub("c.bin");
  CentroidCheckpoint c;
  c.k = 4;
  c.d = 3;
  c.seed = 7;
  c.train_rows = 100;
  c.iterations_done = 6;
  c.centroids = at::randn({4, 3});
  CentroidCheckpoint expect = c;
  expect.iterations_done = 0;
  auto none = LoadCentroidCheckpoint(path, expect);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(SaveCentroidCheckpoint(path, c).ok());
  auto back = LoadCentroidCheckpoint(path, expect);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->iterations_done, 6);
  EXPECT_TRUE((*back)->centroids.equal(c.centroids));
  expect.seed = 8;
  auto other = LoadCentroidCheckpoint(path, expect);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("seed = 7"), std::string::npos)
      << other.status().message();
  ASSERT_TRUE(WriteFileAtomically(path, "MLCDKMC1 short").ok());
  EXPECT_EQ(LoadCentroidCheckpoint(path, c).status().code(), StatusCode::kInvalidArgument);
}

TEST(FeatureRows, RefusesDifferingDimensionsAndReadsAcrossShards) {
  testing::TempDir dir;
  std::vector<float> a(3 * 4), b(2 * 4), c(2 * 5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(-1 - static_cast<int>(i));
  ASSERT_TRUE(WriteNpy(dir.Sub("a.npy"), NpyDtype::kFloat32, {3, 4}, a.data()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("b.npy"), NpyDtype::kFloat32, {2, 4}, b.data()).ok());
  ASSERT_TRUE(WriteNpy(dir.Sub("c.npy"), NpyDtype::kFloat32, {2, 5}, c.data()).ok());
  auto bad = FeatureRows::Open({dir.Sub("a.npy"), dir.Sub("c.npy")});
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("has d = 5"), std::string::npos)
      << bad.status().message();
  auto good = FeatureRows::Open({dir.Sub("a.npy"), dir.Sub("b.npy")});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->rows(), 5);
  at::Tensor rows = *good->Read(2, 4, at::kCPU);  // last row of a, first of b
  at::Tensor want = at::tensor(std::vector<float>{9, 10, 11, 12, -1, -2, -3, -4}).view({2, 4});
  want = want / want.norm(2, {1}, true);
  EXPECT_TRUE(at::allclose(rows, want, 1e-6, 1e-7));
}

TEST(SplitRule, ChainedSplitsEqualOneRowAtATime) {
  // Splits applied in order where a source is split twice and a cluster made by one split is
  // the source of a later one: the host-gathered application equals the rows updated one split
  // at a time with tensor ops, bit for bit.
  const std::vector<ClusterSplit> splits = {{0, 5}, {2, 5}, {3, 0}, {6, 3}};
  at::Tensor means = at::randn({8, 7}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor expect = means.clone();
  const float up = 1 + 1 / 1024.f, down = 1 - 1 / 1024.f;
  at::Tensor grow = at::tensor(std::vector<float>{up, down, up, down, up, down, up});
  at::Tensor shrink = at::tensor(std::vector<float>{down, up, down, up, down, up, down});
  for (const ClusterSplit& s : splits) {
    expect[s.empty].copy_(expect[s.source] * grow);
    expect[s.source].mul_(shrink);
  }
  ApplySplits(splits, means);
  EXPECT_TRUE(means.equal(expect));
}

TEST(RankMemory, EstimateWorkedByHand) {
  RankMemoryPlan p;
  p.total_rows = 1000;
  p.world = 3;
  p.d = 16;
  p.k = 10;
  p.max_points_per_centroid = 40;  // sample 400 < 1000 rows: each rank copies its share
  p.search.workspace_bytes = 400;  // 10 rows of 10 scores x 4 bytes
  const RankMemoryNeed cpu = EstimateRankMemory(p, at::Device(at::kCPU));
  EXPECT_EQ(cpu.rows, 334 * 16 * 4);
  EXPECT_EQ(cpu.sample, 134 * 16 * 4);
  EXPECT_EQ(cpu.centroids, 2 * 10 * 16 * 4 + (160 + 10 + 1) * 8);
  EXPECT_EQ(cpu.chunk, 400 + 10 * 16 * 8);  // the scores and the chunk widened to float64
  p.search.bf16 = true;
  const RankMemoryNeed gpu = EstimateRankMemory(p, at::Device(at::kCUDA, 0));
  EXPECT_EQ(gpu.centroids, 2 * 10 * 16 * 4 + (160 + 10 + 1) * 4 + 10 * 16 * 2);
  EXPECT_EQ(gpu.chunk, 400 + 10 * 16 * 2);  // the scores and the chunk's bf16 rows
  p.max_points_per_centroid = 100;  // the sample is every row: no copy
  EXPECT_EQ(EstimateRankMemory(p, at::Device(at::kCPU)).sample, 0);
}

TEST(RankMemory, RefusalNamesTheBytesAndTheWorldSizeThatFits) {
  RankMemoryPlan p;
  p.total_rows = 1 << 20;
  p.world = 2;
  p.d = 256;
  p.k = 1000;
  p.max_points_per_centroid = 2000;  // the sample is every row
  p.search.workspace_bytes = 4 << 20;
  const RankMemoryNeed need = EstimateRankMemory(p, at::Device(at::kCPU));
  ASSERT_EQ(need.rows, int64_t{512} << 20);
  EXPECT_TRUE(CheckNeedFits(p, need, need.Total(), "this host").ok());
  EXPECT_TRUE(CheckNeedFits(p, need, -1, "this host").ok());  // unknown: let it pass
  // 300 MiB free beside the fixed part: 1 GiB of rows needs 4 ranks.
  const int64_t fixed = need.centroids + need.chunk;
  Status s = CheckNeedFits(p, need, fixed + (300 << 20), "this host");
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("for each of 2 ranks (rows 512.0 MiB = 524288 x d 256"),
            std::string::npos) << s.message();
  EXPECT_NE(s.message().find("a world size of 4 would fit"), std::string::npos) << s.message();
  s = CheckNeedFits(p, need, fixed / 2, "cuda:0");
  EXPECT_NE(s.message().find("cuda:0 has"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no world size fits"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mlcd::worker::cluster
