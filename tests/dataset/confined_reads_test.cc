// Reads of a confined process after its paths were checked: the worker's children
// and clusterd install their data roots once (InstallProcessDataRoots), and every dataset
// shard, index file, sample, IDX and .npy they open afterwards is verified where it was
// opened. Each case checks a path (it passes), swaps a folder of it for a symbolic link to a
// folder outside the roots, and reads: the read must be refused with the same
// PERMISSION_DENIED as a path outside the roots. The process roots are installed in a forked
// child (a gtest death test), so the other tests of this binary stay unconfined.
//
// Also the coordinator's second look at the feature folders (clustering time, rounds after
// the submit check): WriteAlignedFeatureIds lists and reads under the roots again.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

#include "common/confined_file.h"
#include "common/data_roots.h"
#include "common/dataset/dataset_index.h"
#include "common/dataset/sample_reader.h"
#include "common/file_util.h"
#include "common/idx.h"
#include "common/npy.h"
#include "coordinator/dataset_checks.h"
#include "tests/dataset/image_data.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::TempDir;

class ConfinedReadsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    testing::ImageDataOptions o;
    o.count = 12;
    o.shards = 2;
    ASSERT_TRUE(testing::MakeImageDatasets(data_->path(), o).ok());
  }
  static void TearDownTestSuite() { delete data_; }

  void SetUp() override {
    auto roots = DataRoots::Make({root_.path()});
    ASSERT_TRUE(roots.ok());
    roots_ = *roots;
    // The same dataset inside (root/d) and outside (outside/d).
    for (const std::string& base : {root_.path(), outside_.path()}) {
      ASSERT_EQ(std::system(("cp -r " + data_->path() + " " + base + "/d").c_str()), 0);
    }
  }

  // root/<name> becomes a link to outside/<name>.
  void Swap(const std::string& name = "d") {
    ASSERT_EQ(::rename(root_.Sub(name).c_str(), root_.Sub(name + ".old").c_str()), 0);
    ASSERT_EQ(::symlink(outside_.Sub(name).c_str(), root_.Sub(name).c_str()), 0);
  }

  // Runs `read` in a child process with the roots installed; the child exits 0 when `read`
  // returned a refusal naming `path` (and not what lies outside), else 1 printing it.
  void ExpectRefusedInConfinedChild(const std::function<Status()>& read, const std::string& path) {
    EXPECT_EXIT(
        {
          InstallProcessDataRoots(roots_);
          const Status st = read();
          const std::string m = st.message();
          const bool refused = st.code() == StatusCode::kPermissionDenied &&
                               m.find("is not under a data root") != std::string::npos &&
                               m.find(path) != std::string::npos &&
                               m.find(outside_.path()) == std::string::npos;
          std::fprintf(stderr, "%s\n", st.ToString().c_str());
          std::_Exit(refused ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
  }

  static TempDir* data_;
  TempDir root_, outside_;
  DataRoots roots_;
};

TempDir* ConfinedReadsTest::data_ = nullptr;

TEST_F(ConfinedReadsTest, ADatasetIndexReadAfterItsFolderWasSwappedIsRefused) {
  auto built = BuildDatasetIndex(DatasetFormat::kWebDataset, {root_.Sub("d/shards")}, &roots_);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  // The index in a folder of its own; the copy outside names the same (inside) shards.
  ASSERT_TRUE(WriteDatasetIndex(*built, root_.Sub("i/index")).ok());
  ASSERT_TRUE(WriteDatasetIndex(*built, outside_.Sub("i/index")).ok());
  ASSERT_TRUE(LoadDatasetIndex(root_.Sub("i/index"), true, &roots_).ok());
  Swap("i");
  // An unconfined load reads the copy outside (the race is real); with the roots given
  // explicitly, as the coordinator gives them, it is refused too.
  ASSERT_TRUE(LoadDatasetIndex(root_.Sub("i/index"), true).ok());
  EXPECT_EQ(LoadDatasetIndex(root_.Sub("i/index"), true, &roots_).status().code(),
            StatusCode::kPermissionDenied);
  ExpectRefusedInConfinedChild(
      [&] { return LoadDatasetIndex(root_.Sub("i/index"), true).status(); }, root_.Sub("i/index"));
}

TEST_F(ConfinedReadsTest, ShardsAndSamplesReadAfterTheirFolderWasSwappedAreRefused) {
  auto index = BuildDatasetIndex(DatasetFormat::kWebDataset, {root_.Sub("d/shards")}, &roots_);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  // The index stores resolved paths; name the shard through the folder that will be swapped.
  for (auto& f : index->files)
    f.path = root_.Sub("d/shards/") + f.path.substr(f.path.rfind('/') + 1);
  const std::string shard = index->files[0].path;
  ASSERT_TRUE(roots_.Confine(shard, "f").ok());
  Swap();
  // A plain read still works (the race is real): it reaches the copy outside.
  SampleReader plain(&*index);
  std::string bytes;
  ASSERT_TRUE(plain.Read(0, &bytes).ok());
  ExpectRefusedInConfinedChild(
      [&] {
        SampleReader reader(&*index);
        std::string out;
        return reader.Read(0, &out);
      },
      shard);
  ExpectRefusedInConfinedChild(
      [&] { return BuildDatasetIndex(DatasetFormat::kWebDataset, {shard}).status(); }, shard);
}

TEST_F(ConfinedReadsTest, IdxAndNpyReadsAfterTheirFolderWasSwappedAreRefused) {
  std::string images, labels;
  if (FindMnistSplit(kFashionMnistDir, "test", &images, &labels).ok()) {
    ASSERT_EQ(std::system(("cp " + images + " " + root_.Sub("d/images.gz")).c_str()), 0);
    ASSERT_EQ(std::system(("cp " + images + " " + outside_.Sub("d/images.gz")).c_str()), 0);
  }
  const float v[2] = {1, 2};
  ASSERT_TRUE(WriteNpy(root_.Sub("d/c.npy"), NpyDtype::kFloat32, {2}, v).ok());
  ASSERT_TRUE(WriteNpy(outside_.Sub("d/c.npy"), NpyDtype::kFloat32, {2}, v).ok());
  Swap();
  if (!images.empty()) {
    ExpectRefusedInConfinedChild(
        [&] { return ReadIdxImages(root_.Sub("d/images.gz"), 1).status(); },
        root_.Sub("d/images.gz"));
  }
  ExpectRefusedInConfinedChild([&] { return ReadNpy(root_.Sub("d/c.npy")).status(); },
                               root_.Sub("d/c.npy"));
  // Writes of a confined process too (checkpoints, outputs, centroids).
  ExpectRefusedInConfinedChild(
      [&] { return WriteNpy(root_.Sub("d/w.npy"), NpyDtype::kFloat32, {2}, v); },
      root_.Sub("d/w.npy"));
  EXPECT_FALSE(PathExists(outside_.Sub("d/w.npy")));
}

// Before: at clustering time the coordinator listed the feature folders and read the keys
// without its roots (they were checked at submit only), so a link placed in a folder since
// was followed. Now the listing and the reads apply the roots again.
TEST_F(ConfinedReadsTest, TheCoordinatorsClusteringTimeListingAppliesTheRoots) {
  auto index = BuildDatasetIndex(DatasetFormat::kWebDataset, {root_.Sub("d/shards")}, &roots_);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_TRUE(WriteDatasetIndex(*index, root_.Sub("index")).ok());
  const int64_t n = index->size();
  std::vector<float> rows(static_cast<size_t>(n * 2), 1.0f);
  ASSERT_TRUE(MakeDirs(root_.Sub("feats")).ok());
  ASSERT_TRUE(WriteNpy(root_.Sub("feats/a.npy"), NpyDtype::kFloat32, {n, 2}, rows.data()).ok());
  v1::JobSpec spec;
  spec.mutable_dataset()->set_format("webdataset");
  spec.mutable_dataset()->set_index(root_.Sub("index"));
  auto* f = spec.mutable_clustering()->mutable_features();
  f->set_kind("npy");
  f->add_paths(root_.Sub("feats"));
  // The keys in a folder of their own (root/k), with a copy outside (outside/k).
  for (const std::string& base : {root_.path(), outside_.path()}) {
    ASSERT_TRUE(MakeDirs(base + "/k").ok());
    ASSERT_EQ(std::system(("cp " + root_.Sub("d/keys.txt") + " " + base + "/k/").c_str()), 0);
  }
  f->set_keys(root_.Sub("k/keys.txt"));
  ASSERT_TRUE(coordinator::CheckDatasetInputs(spec, &roots_).ok());
  auto ids = coordinator::WriteAlignedFeatureIds(spec, root_.Sub("r0"), &roots_);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  // After the submit check: the shard becomes a link outside, then the keys' folder.
  ASSERT_TRUE(WriteNpy(outside_.Sub("a.npy"), NpyDtype::kFloat32, {n, 2}, rows.data()).ok());
  ASSERT_EQ(::unlink(root_.Sub("feats/a.npy").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.Sub("a.npy").c_str(), root_.Sub("feats/a.npy").c_str()), 0);
  auto listed = coordinator::WriteAlignedFeatureIds(spec, root_.Sub("r1"), &roots_);
  EXPECT_EQ(listed.status().code(), StatusCode::kPermissionDenied) << listed.status().ToString();
  EXPECT_EQ(listed.status().message().find(outside_.path()), std::string::npos);
  ASSERT_EQ(::unlink(root_.Sub("feats/a.npy").c_str()), 0);
  ASSERT_TRUE(WriteNpy(root_.Sub("feats/a.npy"), NpyDtype::kFloat32, {n, 2}, rows.data()).ok());
  ASSERT_EQ(::rename(root_.Sub("k").c_str(), root_.Sub("k.old").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.Sub("k").c_str(), root_.Sub("k").c_str()), 0);
  auto keys = coordinator::WriteAlignedFeatureIds(spec, root_.Sub("r2"), &roots_);
  EXPECT_EQ(keys.status().code(), StatusCode::kPermissionDenied) << keys.status().ToString();
  // Without roots (what the coordinator did at clustering time) both were followed.
  EXPECT_TRUE(coordinator::WriteAlignedFeatureIds(spec, root_.Sub("r3"), nullptr).ok());
}

}  // namespace
}  // namespace mlcd
