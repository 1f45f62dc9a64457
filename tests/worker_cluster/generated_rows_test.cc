// Round-0 features the clustering gang computes itself (FeatureRows::OpenGenerated) against
// the files clusterd writes (clusterd/feature_gen.h): for both kinds, the rows of a range at
// the start, the middle and the end of the split are bit-identical to the same rows of
// clusterd's file, two ranks' ranges together are one rank's rows, and the classes are the
// split's IDX labels. Bad generation specs are refused with their reason.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "clusterd/feature_gen.h"
#include "common/idx.h"
#include "tests/testing/process.h"
#include "worker/cluster/feature_rows.h"
#include "worker/cluster/gang_layout.h"

namespace mlcd::worker::cluster {
namespace {

constexpr int64_t kLimit = 1000;

v1::GeneratedFeatures Generated(const std::string& kind) {
  v1::GeneratedFeatures g;
  g.set_kind(kind);
  g.set_split("test");  // the smaller file: faster to decompress
  g.set_limit(kLimit);
  g.set_dim(48);
  g.set_seed(21);
  return g;
}

// clusterd's own file of the same features, read as the gang reads feature shards.
FeatureRows ClusterdFile(const testing::TempDir& dir, const v1::GeneratedFeatures& g) {
  clusterd::FashionMnistFeatureOptions o;
  o.kind = g.kind();
  o.split = g.split();
  o.limit = static_cast<int64_t>(g.limit());
  o.dim = g.dim();
  o.seed = g.seed();
  o.features_out = dir.Sub(g.kind() + ".npy");
  auto written = clusterd::WriteFashionMnistFeatures(o);
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  auto rows = FeatureRows::Open({o.features_out});
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  return std::move(*rows);
}

at::Tensor ReadOk(const FeatureRows& rows, int64_t begin, int64_t end) {
  auto t = rows.Read(begin, end, at::kCPU);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : at::Tensor();
}

TEST(GeneratedFeatureRows, EqualClusterdsFileAtTheStartMiddleAndEnd) {
  testing::TempDir dir;
  for (const std::string kind : {"pixels", "random-projection"}) {
    SCOPED_TRACE(kind);
    const v1::GeneratedFeatures g = Generated(kind);
    const FeatureRows file = ClusterdFile(dir, g);
    auto generated = FeatureRows::OpenGenerated(g);
    ASSERT_TRUE(generated.ok()) << generated.status().ToString();
    EXPECT_EQ(generated->rows(), kLimit);
    EXPECT_EQ(generated->d(), kind == "pixels" ? 784 : 48);
    ASSERT_EQ(generated->d(), file.d());
    for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{0, 37}, {480, 613}, {901, kLimit}}) {
      const at::Tensor mine = ReadOk(*generated, b, e), theirs = ReadOk(file, b, e);
      ASSERT_EQ(mine.size(0), e - b);
      EXPECT_TRUE(at::equal(mine, theirs)) << "rows [" << b << ", " << e << ") differ by up to "
                                           << (mine - theirs).abs().max().item<float>();
    }
  }
}

TEST(GeneratedFeatureRows, TwoRanksTogetherAreOneRankAndCarryTheLabels) {
  const v1::GeneratedFeatures g = Generated("random-projection");
  auto rows = FeatureRows::OpenGenerated(g);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const int64_t n = rows->rows();
  const at::Tensor one = ReadOk(*rows, 0, n);
  std::vector<at::Tensor> parts;
  std::vector<int64_t> classes;
  for (int r = 0; r < 2; ++r) {
    const int64_t b = EvenSplitBegin(n, 2, r), e = EvenSplitBegin(n, 2, r + 1);
    parts.push_back(ReadOk(*rows, b, e));
    const std::vector<int64_t> part = rows->Classes(b, e);
    classes.insert(classes.end(), part.begin(), part.end());
  }
  EXPECT_TRUE(at::equal(at::cat(parts, 0), one));
  std::string images, labels;
  ASSERT_TRUE(FindMnistSplit(kFashionMnistDir, "test", &images, &labels).ok());
  auto idx = ReadIdxLabels(labels, kLimit);
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(classes, std::vector<int64_t>(idx->begin(), idx->end()));
}

TEST(GeneratedFeatureRows, BadSpecsAreRefusedWithTheirReason) {
  testing::TempDir dir;
  v1::GeneratedFeatures g = Generated("clip");
  auto kind = FeatureRows::OpenGenerated(g);
  EXPECT_EQ(kind.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kind.status().message().find("unknown Fashion-MNIST feature kind 'clip'"),
            std::string::npos)
      << kind.status().ToString();
  g = Generated("pixels");
  g.set_dataset_format("webdataset");
  EXPECT_EQ(FeatureRows::OpenGenerated(g).status().code(), StatusCode::kInvalidArgument);
  g = Generated("pixels");
  g.set_dataset_path(dir.Sub("nowhere"));
  EXPECT_EQ(FeatureRows::OpenGenerated(g).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlcd::worker::cluster
