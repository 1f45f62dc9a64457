// Feature generation: Fashion-MNIST pixels equal the IDX data, projections are deterministic
// and preserve norms roughly, synthetic mixtures are deterministic and near their centres.
#include "clusterd/feature_gen.h"

#include <gtest/gtest.h>

#include <cmath>

#include "clusterd/feature_source.h"
#include "common/file_util.h"
#include "common/idx.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd::clusterd {
namespace {

TEST(FashionMnistFeatures, PixelsAreTheImagesScaled) {
  testing::TempDir dir;
  FashionMnistFeatureOptions o;
  o.split = "test";  // the smaller file: faster to decompress
  o.limit = 50;
  o.features_out = dir.Sub("px/test.npy");
  o.labels_out = dir.Sub("px/test.labels.npy");
  auto info = WriteFashionMnistFeatures(o);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->rows, 50);
  EXPECT_EQ(info->d, 784);
  std::string images, labels;
  ASSERT_TRUE(FindMnistSplit(kFashionMnistDir, "test", &images, &labels).ok());
  auto idx = ReadIdxImages(images, 50);
  auto idx_labels = ReadIdxLabels(labels, 50);
  ASSERT_TRUE(idx.ok() && idx_labels.ok());
  std::vector<int64_t> shape;
  auto f = ReadNpyAsFloat32(o.features_out, &shape);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(shape, (std::vector<int64_t>{50, 784}));
  for (size_t i = 0; i < f->size(); ++i) ASSERT_FLOAT_EQ((*f)[i], idx->pixels[i] / 255.0f);
  auto l = ReadNpyAsInt64(o.labels_out);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 50u);
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ((*l)[i], (*idx_labels)[i]);
  // The directory holds one shard: the labels file is not taken for one.
  auto shards = FeatureShards::Open({dir.Sub("px")});
  ASSERT_TRUE(shards.ok());
  EXPECT_EQ(shards->num_shards(), 1u);
}

TEST(FashionMnistFeatures, RandomProjectionIsSeededAndKeepsNorms) {
  testing::TempDir dir;
  FashionMnistFeatureOptions o;
  o.kind = "random-projection";
  o.split = "test";
  o.limit = 40;
  o.dim = 256;
  o.seed = 9;
  o.features_out = dir.Sub("a.npy");
  ASSERT_TRUE(WriteFashionMnistFeatures(o).ok());
  o.features_out = dir.Sub("b.npy");
  ASSERT_TRUE(WriteFashionMnistFeatures(o).ok());
  o.seed = 10;
  o.features_out = dir.Sub("c.npy");
  ASSERT_TRUE(WriteFashionMnistFeatures(o).ok());
  EXPECT_EQ(*ReadFileToString(dir.Sub("a.npy")), *ReadFileToString(dir.Sub("b.npy")));
  EXPECT_NE(*ReadFileToString(dir.Sub("a.npy")), *ReadFileToString(dir.Sub("c.npy")));
  std::vector<int64_t> shape;
  auto proj = ReadNpyAsFloat32(dir.Sub("a.npy"), &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{40, 256}));
  o.kind = "pixels";
  o.features_out = dir.Sub("p.npy");
  ASSERT_TRUE(WriteFashionMnistFeatures(o).ok());
  auto px = ReadNpyAsFloat32(dir.Sub("p.npy"));
  // Johnson-Lindenstrauss: squared norms are kept in expectation.
  double ratio = 0;
  for (int i = 0; i < 40; ++i) {
    double a = 0, b = 0;
    for (int j = 0; j < 256; ++j) a += (*proj)[i * 256 + j] * (*proj)[i * 256 + j];
    for (int j = 0; j < 784; ++j) b += (*px)[i * 784 + j] * (*px)[i * 784 + j];
    ratio += a / b / 40;
  }
  EXPECT_NEAR(ratio, 1.0, 0.15);
}

TEST(FashionMnistFeatures, BadOptions) {
  testing::TempDir dir;
  FashionMnistFeatureOptions o;
  o.features_out = dir.Sub("x.npy");
  o.kind = "clip";
  EXPECT_EQ(WriteFashionMnistFeatures(o).status().code(), StatusCode::kInvalidArgument);
  o.kind = "pixels";
  o.dataset_dir = dir.Sub("nowhere");
  auto missing = WriteFashionMnistFeatures(o);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  o.dataset_dir = kFashionMnistDir;
  o.features_out = "";
  EXPECT_EQ(WriteFashionMnistFeatures(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(SyntheticMixture, DeterministicAcrossShardingAndNearCentres) {
  testing::TempDir dir;
  SyntheticMixtureOptions o;
  o.rows = 3001;
  o.dim = 16;
  o.num_centres = 5;
  o.noise = 0.4;
  o.seed = 4;
  o.shards = 1;
  o.out_dir = dir.Sub("one");
  o.centres_out = dir.Sub("centres.npy");
  o.labels_out = dir.Sub("comp.labels.npy");
  auto one = WriteSyntheticMixture(o);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  o.shards = 4;
  o.out_dir = dir.Sub("four");
  o.dtype = NpyDtype::kFloat32;
  auto four = WriteSyntheticMixture(o);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->feature_paths.size(), 4u);
  auto s1 = FeatureShards::Open({dir.Sub("one")});
  auto s4 = FeatureShards::Open({dir.Sub("four")});
  ASSERT_TRUE(s1.ok() && s4.ok());
  ASSERT_EQ(s4->rows(), 3001);
  std::vector<float> a(3001 * 16), b(3001 * 16);
  s1->ReadRows(0, 3001, a.data(), false);
  s4->ReadRows(0, 3001, b.data(), false);
  EXPECT_EQ(a, b);
  auto centres = ReadNpyAsFloat32(dir.Sub("centres.npy"));
  auto comp = ReadNpyAsInt64(dir.Sub("comp.labels.npy"));
  ASSERT_TRUE(centres.ok() && comp.ok());
  double mean_cos = 0;
  std::vector<int> count(5, 0);
  for (int i = 0; i < 3001; ++i) {
    int64_t c = (*comp)[i];
    ASSERT_TRUE(c >= 0 && c < 5);
    ++count[c];
    double dot = 0;
    for (int j = 0; j < 16; ++j) dot += a[i * 16 + j] * (*centres)[c * 16 + j];
    mean_cos += dot / 3001;
  }
  EXPECT_NEAR(mean_cos, 1.0 / std::sqrt(1 + 0.4 * 0.4), 0.03);
  for (int c : count) EXPECT_NEAR(c, 600, 120);
}

}  // namespace
}  // namespace mlcd::clusterd
