// Spherical k-means: recovers known centres, equals one FAISS call with the same iterations,
// objective never decreases, subsamples large inputs, stops on cancel.
#include "clusterd/kmeans.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "clusterd/feature_gen.h"
#include "clusterd/feature_source.h"
#include "tests/testing/process.h"

namespace mlcd::clusterd {
namespace {

double Dot(const float* a, const float* b, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += static_cast<double>(a[j]) * b[j];
  return s;
}

SyntheticMixtureOptions Mixture(const std::string& dir, int64_t rows, int dim, int centres,
                                double noise) {
  SyntheticMixtureOptions o;
  o.rows = rows;
  o.dim = dim;
  o.num_centres = centres;
  o.noise = noise;
  o.seed = 7;
  o.shards = 3;
  o.out_dir = dir;
  return o;
}

TEST(SphericalKMeans, RecoversKnownCentres) {
  testing::TempDir dir;
  SyntheticMixtureOptions o = Mixture(dir.Sub("f"), 6000, 16, 8, 0.3);
  ASSERT_TRUE(WriteSyntheticMixture(o).ok());
  std::vector<float> truth;
  SyntheticMixtureCentres(o, &truth);
  auto shards = FeatureShards::Open({dir.Sub("f")});
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();

  // Lloyd from random starts can leave two true clusters under one centroid when k equals
  // the number of components; with 3x as many centroids every component gets its own.
  SphericalKMeansParams p;
  p.k = 24;
  p.niter = 25;
  p.seed = 3;
  auto km = TrainSphericalKMeans(*shards, p);
  ASSERT_TRUE(km.ok()) << km.status().ToString();
  ASSERT_EQ(km->centroids.size(), 24u * 16u);
  for (int c = 0; c < p.k; ++c) {
    EXPECT_NEAR(Dot(&km->centroids[c * 16], &km->centroids[c * 16], 16), 1.0, 1e-5);
  }
  // Every true centre has a centroid at cosine > 0.99; every centroid is near a true centre.
  for (int t = 0; t < o.num_centres; ++t) {
    double best = -1;
    for (int c = 0; c < p.k; ++c)
      best = std::max(best, Dot(&truth[t * 16], &km->centroids[c * 16], 16));
    EXPECT_GT(best, 0.99) << "true centre " << t << " not recovered";
  }
  for (int c = 0; c < p.k; ++c) {
    double best = -1;
    for (int t = 0; t < o.num_centres; ++t)
      best = std::max(best, Dot(&truth[t * 16], &km->centroids[c * 16], 16));
    EXPECT_GT(best, 0.97) << "centroid " << c << " is between components";
  }
  EXPECT_EQ(km->num_points, 6000);
  EXPECT_EQ(km->num_train_points, 6000);
  EXPECT_EQ(km->iterations.size(), 25u);
}

TEST(SphericalKMeans, IterationByIterationEqualsOneFaissCall) {
  testing::TempDir dir;
  SyntheticMixtureOptions o = Mixture(dir.Sub("f"), 3000, 12, 20, 0.8);
  ASSERT_TRUE(WriteSyntheticMixture(o).ok());
  auto shards = FeatureShards::Open({dir.Sub("f")});
  ASSERT_TRUE(shards.ok());
  SphericalKMeansParams p;
  p.k = 30;
  p.niter = 8;
  p.seed = 11;
  auto km = TrainSphericalKMeans(*shards, p);
  ASSERT_TRUE(km.ok()) << km.status().ToString();

  std::vector<float> x(3000 * 12);
  shards->ReadRows(0, 3000, x.data());
  faiss::ClusteringParameters cp;
  cp.niter = 8;
  cp.spherical = true;
  cp.seed = 11;
  cp.min_points_per_centroid = 1;
  faiss::Clustering reference(12, 30, cp);
  faiss::IndexFlatIP index(12);
  reference.train(3000, x.data(), index);
  ASSERT_EQ(reference.iteration_stats.size(), km->iterations.size());
  for (size_t i = 0; i < km->iterations.size(); ++i) {
    EXPECT_NEAR(km->iterations[i].objective, reference.iteration_stats[i].obj,
                1e-3 * std::abs(reference.iteration_stats[i].obj));
    EXPECT_NEAR(km->iterations[i].imbalance_factor, reference.iteration_stats[i].imbalance_factor,
                1e-9);
  }
  for (size_t i = 0; i < reference.centroids.size(); ++i) {
    EXPECT_NEAR(km->centroids[i], reference.centroids[i], 1e-5) << "value " << i;
  }
}

TEST(SphericalKMeans, ObjectiveNeverDecreases) {
  testing::TempDir dir;
  SyntheticMixtureOptions o = Mixture(dir.Sub("f"), 4000, 20, 40, 1.0);
  ASSERT_TRUE(WriteSyntheticMixture(o).ok());
  auto shards = FeatureShards::Open({dir.Sub("f")});
  ASSERT_TRUE(shards.ok());
  SphericalKMeansParams p;
  p.k = 40;
  p.niter = 15;
  std::vector<KMeansIterationStats> streamed;
  KMeansCallbacks cb;
  cb.on_iteration = [&](const KMeansIterationStats& s) { streamed.push_back(s); };
  auto km = TrainSphericalKMeans(*shards, p, cb);
  ASSERT_TRUE(km.ok());
  ASSERT_EQ(streamed.size(), 15u);
  for (size_t i = 1; i < streamed.size(); ++i) {
    EXPECT_EQ(streamed[i].iteration, static_cast<int>(i));
    // Assignment maximises each term and the normalised mean maximises each cluster's sum,
    // so the objective cannot go down (up to float rounding).
    EXPECT_GE(streamed[i].objective, streamed[i - 1].objective - 1e-3) << "iteration " << i;
    EXPECT_GE(streamed[i].seconds, streamed[i - 1].seconds);
    EXPECT_GE(streamed[i].imbalance_factor, 1.0);
  }
  // Objective of training rows is at most n (unit vectors).
  EXPECT_LE(streamed.back().objective, 4000.0 + 1e-3);
}

TEST(SphericalKMeans, LargeInputsAreSubsampledForTraining) {
  testing::TempDir dir;
  SyntheticMixtureOptions o = Mixture(dir.Sub("f"), 5000, 8, 10, 0.3);
  ASSERT_TRUE(WriteSyntheticMixture(o).ok());
  auto shards = FeatureShards::Open({dir.Sub("f")});
  ASSERT_TRUE(shards.ok());
  SphericalKMeansParams p;
  p.k = 10;
  p.niter = 5;
  p.max_points_per_centroid = 40;
  std::vector<std::string> notes;
  KMeansCallbacks cb;
  cb.on_note = [&](const std::string& n) { notes.push_back(n); };
  auto km = TrainSphericalKMeans(*shards, p, cb);
  ASSERT_TRUE(km.ok());
  EXPECT_EQ(km->num_train_points, 400);
  EXPECT_EQ(km->num_points, 5000);
  bool said = false;
  for (const auto& n : notes) said |= n.find("sampling 400 of 5000 rows") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(SampleRows, DistinctAscendingAndUniform) {
  std::vector<int64_t> s = SampleRows(100000, 20000, 5);
  ASSERT_EQ(s.size(), 20000u);
  for (size_t i = 1; i < s.size(); ++i) ASSERT_LT(s[i - 1], s[i]);
  EXPECT_GE(s.front(), 0);
  EXPECT_LT(s.back(), 100000);
  // Each tenth of the range holds about a tenth of the sample (binomial sd ~ 42).
  std::vector<int> bins(10, 0);
  for (int64_t r : s) ++bins[r / 10000];
  for (int b : bins) EXPECT_NEAR(b, 2000, 250);
  EXPECT_EQ(SampleRows(10, 50, 1).size(), 10u);
  EXPECT_NE(SampleRows(1000, 10, 1), SampleRows(1000, 10, 2));
}

TEST(SphericalKMeans, StopsWhenCancelled) {
  testing::TempDir dir;
  SyntheticMixtureOptions o = Mixture(dir.Sub("f"), 3000, 8, 10, 0.5);
  ASSERT_TRUE(WriteSyntheticMixture(o).ok());
  auto shards = FeatureShards::Open({dir.Sub("f")});
  ASSERT_TRUE(shards.ok());
  SphericalKMeansParams p;
  p.k = 10;
  p.niter = 50;
  int iterations = 0;
  KMeansCallbacks cb;
  cb.on_iteration = [&](const KMeansIterationStats&) { ++iterations; };
  cb.should_stop = [&] { return iterations >= 2; };
  auto km = TrainSphericalKMeans(*shards, p, cb);
  ASSERT_FALSE(km.ok());
  EXPECT_EQ(km.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(iterations, 2);
}

}  // namespace
}  // namespace mlcd::clusterd
