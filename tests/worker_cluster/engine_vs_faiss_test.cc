// The gang engine (one rank, no process group) against clusterd's exact FAISS path on the same
// shards, sample rule and seed: the same training sample, centroids within 1e-4 after the
// same iterations, the same per-iteration objectives, and >= 99.9 % of rows with the same
// top-l set (ties aside).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "clusterd/assign.h"
#include "clusterd/feature_gen.h"
#include "clusterd/feature_source.h"
#include "clusterd/kmeans.h"
#include "tests/testing/process.h"
#include "worker/cluster/feature_rows.h"
#include "worker/cluster/gang_assign.h"
#include "worker/cluster/gang_kmeans.h"
#include "worker/cluster/nearest.h"

namespace mlcd::worker::cluster {
namespace {

struct Case {
  int64_t rows;
  int dim, centres, k, niter, mppc, l;
};

void CompareWithFaiss(const Case& c) {
  testing::TempDir dir;
  clusterd::SyntheticMixtureOptions o;
  o.rows = c.rows;
  o.dim = c.dim;
  o.num_centres = c.centres;
  o.noise = 0.6;
  o.seed = 11;
  o.shards = 2;
  o.out_dir = dir.Sub("f");
  ASSERT_TRUE(clusterd::WriteSyntheticMixture(o).ok());
  std::vector<std::string> paths = {dir.Sub("f/shard-00000.npy"), dir.Sub("f/shard-00001.npy")};
  auto shards = clusterd::FeatureShards::Open(paths);
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();

  clusterd::SphericalKMeansParams fp;
  fp.k = c.k;
  fp.niter = c.niter;
  fp.seed = 5;
  fp.max_points_per_centroid = c.mppc;
  fp.threads = 1;
  auto faiss_km = clusterd::TrainSphericalKMeans(*shards, fp);
  ASSERT_TRUE(faiss_km.ok()) << faiss_km.status().ToString();

  auto features = FeatureRows::Open(paths);
  ASSERT_TRUE(features.ok()) << features.status().ToString();
  at::Tensor rows = *features->Read(0, features->rows(), at::kCPU);
  GangKMeansParams gp;
  gp.k = c.k;
  gp.niter = c.niter;
  gp.seed = 5;
  gp.max_points_per_centroid = c.mppc;
  gp.search.workspace_bytes = 64 << 10;  // many chunks
  auto comm = Collectives::Local();
  auto gang = TrainGangKMeans(rows, 0, gp, *comm);
  ASSERT_TRUE(gang.ok()) << gang.status().ToString();

  EXPECT_EQ(gang->train_rows, faiss_km->num_train_points);
  std::vector<int64_t> sample = clusterd::SampleRows(c.rows, int64_t{c.k} * c.mppc, 5);
  at::Tensor s = gang->local_sample_rows;
  ASSERT_EQ(static_cast<size_t>(s.numel()), sample.size());
  EXPECT_TRUE(std::equal(sample.begin(), sample.end(), s.data_ptr<int64_t>()));

  ASSERT_EQ(gang->iterations.size(), faiss_km->iterations.size());
  for (size_t i = 0; i < gang->iterations.size(); ++i) {
    EXPECT_NEAR(gang->iterations[i].objective, faiss_km->iterations[i].objective,
                1e-4 * std::abs(faiss_km->iterations[i].objective))
        << "iteration " << i;
    EXPECT_EQ(gang->iterations[i].splits, faiss_km->iterations[i].splits) << "iteration " << i;
  }
  at::Tensor fc = at::from_blob(faiss_km->centroids.data(), {c.k, c.dim}, at::kFloat);
  const double max_diff = (gang->centroids - fc).abs().max().item<double>();
  EXPECT_LT(max_diff, 1e-4);

  // Top-l of every row: the gang's search against FAISS's exact index on FAISS's centroids.
  GangAssignParams ap;
  ap.l = c.l;
  std::vector<int32_t> gang_labels;
  auto stats = AssignGangTopL(rows, 0, gang->centroids, ap, *comm,
                              [&](int64_t, const labelstore::LabelBatch& b) {
                                gang_labels.insert(gang_labels.end(), b.labels.begin(),
                                                   b.labels.end());
                                return Status::Ok();
                              });
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->rows, c.rows);
  clusterd::AssignParams fa;
  fa.l = c.l;
  fa.threads = 1;
  auto index = clusterd::CentroidIndex::Build(faiss_km->centroids, c.k, c.dim, fa);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  std::vector<float> x(static_cast<size_t>(c.rows) * c.dim), scores(c.rows * c.l);
  std::vector<int32_t> faiss_labels(c.rows * c.l);
  shards->ReadRows(0, c.rows, x.data());
  (*index)->SearchExact(c.rows, x.data(), c.l, scores.data(), faiss_labels.data());
  int64_t same = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    std::set<int32_t> a(gang_labels.begin() + r * c.l, gang_labels.begin() + (r + 1) * c.l);
    std::set<int32_t> b(faiss_labels.begin() + r * c.l, faiss_labels.begin() + (r + 1) * c.l);
    same += a == b;
  }
  EXPECT_GE(static_cast<double>(same) / c.rows, 0.999) << same << " of " << c.rows;
}

TEST(GangEngineVsFaiss, SampledTrainingSet) {
  // 12000 rows > k * mppc = 64 * 128: the sample rule and FAISS's permutation both matter.
  CompareWithFaiss({12000, 24, 20, 64, 8, 128, 4});
}

TEST(GangEngineVsFaiss, EveryRowTrainsAndEmptyClustersSplit) {
  // k close to the rows: FAISS's split rule has to re-seed empty clusters.
  CompareWithFaiss({600, 8, 6, 200, 6, 256, 3});
}

TEST(GangEngineVsFaiss, SampleOfExactlyKRowsIsCopied) {
  CompareWithFaiss({300, 8, 4, 300, 5, 256, 2});
}

TEST(NearestSearch, EqualScoresGoToTheFirstCentroidAsInFaissAcrossCpuBlocks) {
  // Coordinates are multiples of 1/4 in [-1, 1], so every inner product is exact in float32
  // and equal scores are frequent. 40000 rows x 100 centroids is 15 MiB of scores: more than
  // one CPU score block (kCpuScoreBlockBytes) under the default workspace. Expected by hand:
  // each row goes to the first centroid of largest inner product (FAISS's top-1 rule).
  const int64_t n = 40000, k = 100, d = 4;  // k: a whole scan block of RowMax and a tail
  ASSERT_GT(n * k * 4, kCpuScoreBlockBytes);
  at::manual_seed(3);
  at::Tensor rows = at::randint(-4, 5, {n, d}).to(at::kFloat) / 4;
  at::Tensor centroids = at::randint(-4, 5, {k, d}).to(at::kFloat) / 4;
  at::Tensor sums = at::zeros({k, d}, at::kDouble);
  at::Tensor counts = at::zeros({k}, at::kDouble);
  const double objective = AccumulateNearest(rows, centroids, SearchOptions{}, sums, counts);

  std::vector<double> want_sums(k * d, 0.0), want_counts(k, 0.0);
  double want_objective = 0;
  auto r_acc = rows.accessor<float, 2>();
  auto c_acc = centroids.accessor<float, 2>();
  int64_t ties = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    double best_ip = -1e30;
    int equal = 0;
    for (int64_t j = 0; j < k; ++j) {
      double ip = 0;
      for (int64_t t = 0; t < d; ++t) ip += double{r_acc[i][t]} * c_acc[j][t];
      if (ip > best_ip) {
        best_ip = ip;
        best = j;
        equal = 1;
      } else if (ip == best_ip) {
        ++equal;
      }
    }
    ties += equal > 1;
    want_objective += best_ip;
    want_counts[best] += 1;
    for (int64_t t = 0; t < d; ++t) want_sums[best * d + t] += r_acc[i][t];
  }
  ASSERT_GT(ties, n / 10) << "the case should be full of equal scores";
  EXPECT_EQ(objective, want_objective);
  for (int64_t j = 0; j < k; ++j) {
    ASSERT_EQ(counts[j].item<double>(), want_counts[j]) << "centroid " << j;
    for (int64_t t = 0; t < d; ++t)
      ASSERT_EQ(sums[j][t].item<double>(), want_sums[j * d + t]) << "centroid " << j;
  }
}

}  // namespace
}  // namespace mlcd::worker::cluster
