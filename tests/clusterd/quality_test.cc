// Label quality (paper A.8) and NMI on a case worked by hand.
#include "clusterd/quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace mlcd::clusterd {
namespace {

TEST(LabelQuality, WorkedExample) {
  // Six rows, three clusters, l = 2.
  //   row  class  labels      top-1 cluster members: c0 = {r0, r1} (classes 0, 0) -> 0
  //   r0   0      (0, 1)                             c1 = {r2, r3, r4} (0, 1, 1) -> 1
  //   r1   0      (0, 2)                             c2 = {r5} (2)              -> 2
  //   r2   0      (1, 0)      top-1 recall: all but r2 -> 5/6
  //   r3   1      (1, 2)      top-2 recall: r2's second cluster c0 maps to 0 -> 6/6
  //   r4   1      (1, 0)
  //   r5   2      (2, 1)
  std::vector<int64_t> classes = {0, 0, 0, 1, 1, 2};
  std::vector<int32_t> labels = {0, 1, 0, 2, 1, 0, 1, 2, 1, 0, 2, 1};
  LabelQuality q = ComputeLabelQuality(classes, labels, 3, 2);
  EXPECT_DOUBLE_EQ(q.top1_recall, 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(q.topl_recall, 1.0);
  EXPECT_EQ(q.num_classes, 3);
  EXPECT_EQ(q.clusters_used, 3);
  // Contingency (cluster x class): c0 = [2 0 0], c1 = [1 2 0], c2 = [0 0 1]; N = 6; cluster
  // sizes (2, 3, 1), class sizes (3, 2, 1).
  double mi = 2.0 / 6 * std::log(6.0 * 2 / (2 * 3)) + 1.0 / 6 * std::log(6.0 * 1 / (3 * 3)) +
              2.0 / 6 * std::log(6.0 * 2 / (3 * 2)) + 1.0 / 6 * std::log(6.0 * 1 / (1 * 1));
  double h =
      -(2.0 / 6 * std::log(2.0 / 6) + 3.0 / 6 * std::log(3.0 / 6) + 1.0 / 6 * std::log(1.0 / 6));
  EXPECT_NEAR(q.nmi, mi / h, 1e-12);

  // The streaming accumulator gives the same, rows added out of order.
  LabelQualityAccumulator acc(classes, 3, 2);
  acc.Add(3, 3, labels.data() + 6);
  EXPECT_FALSE(acc.Finish().ok());
  acc.Add(0, 3, labels.data());
  auto q2 = acc.Finish();
  ASSERT_TRUE(q2.ok());
  EXPECT_DOUBLE_EQ(q2->top1_recall, q.top1_recall);
  EXPECT_DOUBLE_EQ(q2->nmi, q.nmi);
}

TEST(LabelQuality, PerfectAndUninformativeClusterings) {
  std::vector<int64_t> classes = {0, 0, 1, 1, 2, 2};
  // Clusters are a relabelling of classes: NMI 1, recall 1.
  LabelQuality q = ComputeLabelQuality(classes, {2, 2, 0, 0, 1, 1}, 3, 1);
  EXPECT_DOUBLE_EQ(q.top1_recall, 1.0);
  EXPECT_NEAR(q.nmi, 1.0, 1e-12);
  // One cluster for everything: NMI 0, recall = share of the dominant (lowest id on ties) class.
  LabelQuality one = ComputeLabelQuality(classes, {0, 0, 0, 0, 0, 0}, 1, 1);
  EXPECT_NEAR(one.nmi, 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(one.top1_recall, 2.0 / 6.0);
}

TEST(LabelQuality, DenseAndHashedContingencyTablesAgree) {
  // The same rows with classes 0..9 (4000 x 10 cells: dense table) and with every class y
  // renamed 150 y (4000 x 1351 cells > 2^22: hashed table). Recall, NMI and clusters used do
  // not depend on the names of the classes (the renaming keeps their order, so ties go the
  // same way), so both paths must give the same figures.
  const int k = 4000, l = 4;
  const int64_t n = 20000;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> cluster(0, k - 1);
  std::vector<int64_t> classes(n), renamed(n);
  std::vector<int32_t> labels(n * l);
  for (int64_t i = 0; i < n; ++i) {
    const int c = cluster(rng);
    for (int j = 0; j < l; ++j) labels[i * l + j] = j == 0 ? c : cluster(rng);
    // Mostly the class of the top-1 cluster, sometimes another: an informative clustering.
    classes[i] = rng() % 4 == 0 ? static_cast<int64_t>(rng() % 10) : c % 10;
    renamed[i] = 150 * classes[i];
  }
  LabelQuality dense = ComputeLabelQuality(classes, labels, k, l);
  LabelQuality hashed = ComputeLabelQuality(renamed, labels, k, l);
  EXPECT_EQ(dense.num_classes, 10);
  EXPECT_EQ(hashed.num_classes, 1351);
  EXPECT_GT(static_cast<double>(k) * hashed.num_classes, double(1 << 22));
  EXPECT_DOUBLE_EQ(hashed.top1_recall, dense.top1_recall);
  EXPECT_DOUBLE_EQ(hashed.topl_recall, dense.topl_recall);
  EXPECT_EQ(hashed.clusters_used, dense.clusters_used);
  EXPECT_NEAR(hashed.nmi, dense.nmi, 1e-12);
  EXPECT_GT(dense.top1_recall, 0.7);
  EXPECT_GT(dense.nmi, 0.3);
}

TEST(LabelQuality, FinishRejectsOutOfRangeIdsInsteadOfAllocating) {
  // A class id of 1e12 would size the per-class counters at 8 TB.
  LabelQualityAccumulator huge_class({0, 1000000000000, 1}, 2, 1);
  std::vector<int32_t> labels = {0, 1, 1};
  huge_class.Add(0, 3, labels.data());
  auto q = huge_class.Finish();
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("class id 1000000000000 of row 1 is outside [0, 16777216)"),
            std::string::npos)
      << q.status().message();

  LabelQualityAccumulator bad_cluster({0, 1, 1}, 2, 1);
  std::vector<int32_t> out_of_range = {0, 2, 1};
  bad_cluster.Add(0, 3, out_of_range.data());
  auto c = bad_cluster.Finish();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cluster id 2 of row 1 is outside [0, 2)"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace mlcd::clusterd
