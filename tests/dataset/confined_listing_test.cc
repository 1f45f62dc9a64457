// Listing a confined directory: an image folder, a directory of WebDataset shards
// or of .npy feature shards may hold a symbolic link that leads outside the data roots. With
// roots given, each link must resolve under them before anything follows it; a link leading
// outside and a dangling one are refused with the same PERMISSION_DENIED, which names the
// link (inside the root) and never its target. An index naming files outside is refused too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "common/data_roots.h"
#include "common/dataset/dataset_index.h"
#include "common/dataset/feature_keys.h"
#include "common/dataset/webdataset.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::TempDir;

void Write(const std::string& path, const std::string& text) {
  ASSERT_TRUE(MakeDirs(path.substr(0, path.rfind('/'))).ok());
  std::ofstream(path, std::ios::binary) << text;
}

void Link(const std::string& target, const std::string& link) {
  ASSERT_TRUE(MakeDirs(link.substr(0, link.rfind('/'))).ok());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0) << link;
}

class ConfinedListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto roots = DataRoots::Make({root_.path()});
    ASSERT_TRUE(roots.ok());
    roots_ = *roots;
    Write(outside_.Sub("secret.jpg"), "not yours");
    Write(outside_.Sub("secret.tar"), "not yours");
    Write(outside_.Sub("dir/x.jpg"), "not yours");
  }

  // The refusal of `status` with the link's path cut out (for comparing two refusals).
  std::string Refusal(const Status& status, const std::string& link) {
    EXPECT_EQ(status.code(), StatusCode::kPermissionDenied) << status.ToString();
    std::string m = status.message();
    EXPECT_EQ(m.find(outside_.path()), std::string::npos) << "names the target: " << m;
    EXPECT_NE(m.find("is not under a data root"), std::string::npos) << m;
    const size_t at = m.find(link);
    EXPECT_NE(at, std::string::npos) << m;
    if (at != std::string::npos) m.replace(at, link.size(), "<link>");
    return m;
  }

  TempDir root_, outside_;
  DataRoots roots_;
};

TEST_F(ConfinedListingTest, ImageFolderLinksOutsideTheRootsAreRefusedAlike) {
  Write(root_.Sub("data/cat/1.jpg"), "a");
  Write(root_.Sub("data/dog/2.jpg"), "b");
  const std::string link = root_.Sub("data/cat/evil.jpg");
  Link(outside_.Sub("secret.jpg"), link);
  // Without roots (mlcdctl on a user's own files) the link is followed, as before.
  auto open = BuildDatasetIndex(DatasetFormat::kImageFolder, {root_.Sub("data")});
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  EXPECT_EQ(open->size(), 3);

  auto refused = BuildDatasetIndex(DatasetFormat::kImageFolder, {root_.Sub("data")}, &roots_);
  ASSERT_FALSE(refused.ok());
  const std::string exists = Refusal(refused.status(), link);
  ASSERT_EQ(::unlink(link.c_str()), 0);
  Link(outside_.Sub("missing.jpg"), link);
  auto dangling = BuildDatasetIndex(DatasetFormat::kImageFolder, {root_.Sub("data")}, &roots_);
  ASSERT_FALSE(dangling.ok());
  EXPECT_EQ(Refusal(dangling.status(), link), exists);

  // A class folder that is a link outside.
  ASSERT_EQ(::unlink(link.c_str()), 0);
  const std::string cls = root_.Sub("data/zebra");
  Link(outside_.Sub("dir"), cls);
  auto class_link = BuildDatasetIndex(DatasetFormat::kImageFolder, {root_.Sub("data")}, &roots_);
  ASSERT_FALSE(class_link.ok());
  Refusal(class_link.status(), cls);

  // Links that stay under the roots are fine.
  ASSERT_EQ(::unlink(cls.c_str()), 0);
  Link(root_.Sub("data/dog/2.jpg"), root_.Sub("data/cat/alias.jpg"));
  auto inside = BuildDatasetIndex(DatasetFormat::kImageFolder, {root_.Sub("data")}, &roots_);
  ASSERT_TRUE(inside.ok()) << inside.status().ToString();
  EXPECT_EQ(inside->size(), 3);
}

TEST_F(ConfinedListingTest, ShardDirectoriesAndPatternsFollowNoLinkOutside) {
  Write(root_.Sub("shards/a.tar"), "");
  const std::string link = root_.Sub("shards/b.tar");
  Link(outside_.Sub("secret.tar"), link);
  auto listed = ExpandShardPaths({root_.Sub("shards")}, &roots_);
  ASSERT_FALSE(listed.ok());
  const std::string exists = Refusal(listed.status(), link);
  auto pattern = ExpandShardPaths({root_.Sub("shards/{a,b}.tar")}, &roots_);
  ASSERT_FALSE(pattern.ok());
  EXPECT_EQ(Refusal(pattern.status(), link), exists);
  ASSERT_EQ(::unlink(link.c_str()), 0);
  Link(outside_.Sub("missing.tar"), link);
  auto dangling = ExpandShardPaths({root_.Sub("shards")}, &roots_);
  ASSERT_FALSE(dangling.ok());
  EXPECT_EQ(Refusal(dangling.status(), link), exists);
  EXPECT_TRUE(ExpandShardPaths({root_.Sub("shards")}).ok());  // no roots: as before
}

TEST_F(ConfinedListingTest, NpyFeatureFoldersFollowNoLinkOutside) {
  const float rows[4] = {1, 2, 3, 4};
  ASSERT_TRUE(MakeDirs(root_.Sub("feats")).ok());
  ASSERT_TRUE(WriteNpy(root_.Sub("feats/a.npy"), NpyDtype::kFloat32, {2, 2}, rows).ok());
  ASSERT_TRUE(WriteNpy(outside_.Sub("b.npy"), NpyDtype::kFloat32, {2, 2}, rows).ok());
  const std::string link = root_.Sub("feats/b.npy");
  Link(outside_.Sub("b.npy"), link);
  auto open = ListNpyShardRows({root_.Sub("feats")});
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->size(), 2u);
  auto refused = ListNpyShardRows({root_.Sub("feats")}, &roots_);
  ASSERT_FALSE(refused.ok());
  Refusal(refused.status(), link);
}

TEST_F(ConfinedListingTest, AnIndexNamingFilesOutsideTheRootsIsRefused) {
  // An index kept inside the roots whose files.tsv names images outside them.
  Write(outside_.Sub("folder/1.jpg"), "a");
  auto index = BuildDatasetIndex(DatasetFormat::kImageFolder, {outside_.Sub("folder")});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_TRUE(WriteDatasetIndex(*index, root_.Sub("idx")).ok());
  EXPECT_TRUE(LoadDatasetIndex(root_.Sub("idx"), true).ok());
  auto refused = LoadDatasetIndex(root_.Sub("idx"), true, &roots_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("is not under a data root"), std::string::npos);
  // The same once the file is gone (the fingerprint check never runs first).
  ASSERT_EQ(::unlink(outside_.Sub("folder/1.jpg").c_str()), 0);
  auto gone = LoadDatasetIndex(root_.Sub("idx"), true, &roots_);
  EXPECT_EQ(gone.status().code(), StatusCode::kPermissionDenied) << gone.status().ToString();
  EXPECT_EQ(gone.status().message(), refused.status().message());
}

}  // namespace
}  // namespace mlcd
