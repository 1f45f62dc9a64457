// A request's feature source: paths are resolved and passed on; `generate` writes the
// Fashion-MNIST features once (a cache: a second call reads them as they are) and names them
// as the one shard; bad combinations are rejected before any work.
#include "clusterd/feature_request.h"

#include <gtest/gtest.h>

#include "clusterd/feature_gen.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd::clusterd {
namespace {

StatusOr<std::string> Under(const std::string& dir, const std::string& path) {
  return path.empty() || path[0] == '/' ? path : dir + "/" + path;
}

TEST(FeatureRequest, PathsAreResolvedAndPassedOn) {
  v1::FeatureSource source;
  source.add_paths("a.npy");
  source.add_paths("/abs/b.npy");
  source.add_ids_paths("a.ids.npy");
  ASSERT_TRUE(CheckFeatureSource(source).ok());
  auto in = PrepareFeatures(
      source, [](const std::string& p, const std::string&) { return Under("/data", p); }, nullptr);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->paths, (std::vector<std::string>{"/data/a.npy", "/abs/b.npy"}));
  EXPECT_EQ(in->ids_paths, (std::vector<std::string>{"/data/a.ids.npy"}));
}

TEST(FeatureRequest, BadSourcesAreRejected) {
  v1::FeatureSource empty;
  EXPECT_EQ(CheckFeatureSource(empty).code(), StatusCode::kInvalidArgument);
  v1::FeatureSource both;
  both.add_paths("a.npy");
  both.mutable_generate()->set_features_out("f.npy");
  EXPECT_EQ(CheckFeatureSource(both).code(), StatusCode::kInvalidArgument);
  v1::FeatureSource no_out;
  no_out.mutable_generate()->set_kind("pixels");
  EXPECT_EQ(CheckFeatureSource(no_out).code(), StatusCode::kInvalidArgument);
  v1::FeatureSource format;
  format.mutable_generate()->set_features_out("f.npy");
  format.mutable_generate()->set_dataset_format("imagenet");
  EXPECT_EQ(CheckFeatureSource(format).code(), StatusCode::kInvalidArgument);
}

TEST(FeatureRequest, GeneratedFeaturesAreWrittenOnceLikeFeatureGen) {
  testing::TempDir dir;
  v1::FeatureSource source;
  auto* g = source.mutable_generate();
  g->set_kind("random-projection");
  g->set_split("test");
  g->set_limit(40);
  g->set_dim(16);
  g->set_seed(5);
  g->set_features_out("feats/features.npy");
  g->set_labels_out("feats/classes.labels.npy");
  ASSERT_TRUE(CheckFeatureSource(source).ok());
  auto resolve = [&](const std::string& p, const std::string&) { return Under(dir.path(), p); };
  std::vector<std::string> notes;
  auto note = [&](const std::string& n) { notes.push_back(n); };
  auto in = PrepareFeatures(source, resolve, note);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->paths, (std::vector<std::string>{dir.Sub("feats/features.npy")}));
  EXPECT_TRUE(in->ids_paths.empty());
  EXPECT_EQ(notes, (std::vector<std::string>{"writing round-0 random-projection features of "
                                             "fashion-mnist"}));
  ASSERT_TRUE(PathExists(dir.Sub("feats/classes.labels.npy")));

  // The same bytes as the library writes for the same options.
  FashionMnistFeatureOptions o;
  o.kind = "random-projection";
  o.split = "test";
  o.limit = 40;
  o.dim = 16;
  o.seed = 5;
  o.features_out = dir.Sub("ref/features.npy");
  ASSERT_TRUE(WriteFashionMnistFeatures(o).ok());
  std::vector<int64_t> shape, ref_shape;
  auto got = ReadNpyAsFloat32(in->paths[0], &shape);
  auto ref = ReadNpyAsFloat32(o.features_out, &ref_shape);
  ASSERT_TRUE(got.ok() && ref.ok());
  EXPECT_EQ(shape, (std::vector<int64_t>{40, 16}));
  EXPECT_EQ(*got, *ref);

  // A second call finds the cache complete and writes nothing.
  notes.clear();
  auto again = PrepareFeatures(source, resolve, note);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(again->paths, in->paths);
}

}  // namespace
}  // namespace mlcd::clusterd
