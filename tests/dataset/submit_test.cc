// Submit-time checks of image datasets (coordinator/dataset_checks.h through
// ParseSubmission): the index and its fingerprint, shards named by the spec, npy features
// aligned by keys; and the sample-id files clusterd reads for key-aligned features.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "clusterd/feature_source.h"
#include "common/data_roots.h"
#include "common/dataset/dataset_index.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "coordinator/dataset_checks.h"
#include "coordinator/input_checks.h"
#include "tests/dataset/image_data.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr int kImages = 24;
constexpr int kDim = 4;

class SubmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ImageDataOptions o;
    o.count = kImages;
    o.shards = 3;
    ASSERT_TRUE(testing::MakeImageDatasets(dir_.path(), o).ok());
    auto index = BuildDatasetIndex(DatasetFormat::kWebDataset,
                                   {dir_.Sub("shards/train-{00000..00002}.tar")});
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    ASSERT_TRUE(WriteDatasetIndex(*index, dir_.Sub("idx")).ok());
    keys_ = index->keys;
    // Feature of sample s: (s, s, s, s) + 1; the file lists samples in reversed order.
    std::vector<float> rows;
    std::ofstream k(dir_.Sub("keys.txt"));
    for (int r = 0; r < kImages; ++r) {
      const int s = kImages - 1 - r;
      for (int j = 0; j < kDim; ++j) rows.push_back(static_cast<float>(s + 1 + j));
      k << keys_[s] << "\n";
    }
    ASSERT_TRUE(MakeDirs(dir_.Sub("feats")).ok());
    ASSERT_TRUE(
        WriteNpy(dir_.Sub("feats/a.npy"), NpyDtype::kFloat32, {10, kDim}, rows.data()).ok());
    ASSERT_TRUE(WriteNpy(dir_.Sub("feats/b.npy"), NpyDtype::kFloat32, {kImages - 10, kDim},
                         rows.data() + 10 * kDim)
                    .ok());
  }

  std::string Spec(const std::string& dataset_extra, const std::string& features) const {
    return "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata: {name: wds}\nspec:\n"
           "  dataset: {format: webdataset, index: '" +
           dir_.Sub("idx") + "'" + dataset_extra +
           "}\n  clustering: {k: 4, l: 2, features: " + features +
           "}\n  training: {batch_size: 8}\n  evaluation: {enabled: false}\n";
  }
  std::string NpyFeatures(const std::string& keys) const {
    return "{kind: npy, paths: ['" + dir_.Sub("feats") + "']" +
           (keys.empty() ? "" : ", keys: '" + keys + "'") + "}";
  }
  // A submission naming the webdataset by `path` (no index: the coordinator builds one).
  v1::SubmitJobRequest ByPath(const std::string& path) const {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(
        "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  dataset: {format: webdataset, path: '" +
        path + "'}\n  clustering: {k: 4, l: 2, features: " + NpyFeatures(dir_.Sub("keys.txt")) +
        "}\n  training: {batch_size: 8}\n  evaluation: {enabled: false}\n");
    return request;
  }
  Status Submit(const std::string& yaml) const {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(yaml);
    request.set_dry_run(true);
    return coordinator::ParseSubmission(request).status();
  }

  TempDir dir_;
  std::vector<std::string> keys_;
};

TEST_F(SubmitTest, KeyAlignedFeaturesAreAcceptedAndGiveEverySampleItsRow) {
  const std::string yaml = Spec("", NpyFeatures(dir_.Sub("keys.txt")));
  v1::SubmitJobRequest request;
  request.set_spec_yaml(yaml);
  auto parsed = coordinator::ParseSubmission(request);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  // Defaults of the image formats.
  const v1::JobSpec& spec = parsed->spec;
  EXPECT_EQ(spec.model().image_size(), 224);
  EXPECT_EQ(spec.model().channels(), 3);
  ASSERT_EQ(spec.dataset().mean_size(), 3);
  EXPECT_DOUBLE_EQ(spec.dataset().mean(0), 0.48145466);
  EXPECT_DOUBLE_EQ(spec.dataset().crop_min_scale(), 0.08);
  EXPECT_DOUBLE_EQ(spec.dataset().max_bad_fraction(), 0.001);
  EXPECT_EQ(spec.dataset().loader_threads(), 2);
  // The ids files the coordinator writes at round 0, read by clusterd: row r is sample
  // kImages-1-r, whose feature starts at s + 1.
  auto ids = coordinator::WriteAlignedFeatureIds(spec, dir_.Sub("ids"));
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  auto shards = clusterd::FeatureShards::Open({dir_.Sub("feats")}, *ids);
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();
  std::vector<float> row(kDim);
  for (int r = 0; r < kImages; ++r) {
    const uint64_t s = shards->sample_id(r);
    EXPECT_EQ(s, static_cast<uint64_t>(kImages - 1 - r));
    shards->ReadRows(r, r + 1, row.data(), /*normalize=*/false);
    EXPECT_EQ(row[0], static_cast<float>(s + 1));
  }
}

TEST_F(SubmitTest, FeatureKeyProblemsAreInvalidArgumentsNamingFileRowAndCounts) {
  std::vector<std::string> lines = testing::ReadLines(dir_.Sub("keys.txt"));
  lines[3] = lines[7];
  std::ofstream(dir_.Sub("dup.txt")) << [&] {
    std::string s;
    for (auto& l : lines) s += l + "\n";
    return s;
  }();
  Status dup = Submit(Spec("", NpyFeatures(dir_.Sub("dup.txt"))));
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("spec.clustering.features.keys"), std::string::npos);
  EXPECT_NE(dup.message().find("dup.txt row 7"), std::string::npos) << dup.message();
  EXPECT_NE(dup.message().find("24 keys for 24 feature rows and 24 samples"), std::string::npos);
  // Without keys the rows must number the samples.
  fs::remove(dir_.Sub("feats/b.npy"));
  Status rows = Submit(Spec("", NpyFeatures("")));
  EXPECT_EQ(rows.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rows.message().find("10 rows but the dataset index has 24 samples"), std::string::npos)
      << rows.message();
}

TEST_F(SubmitTest, ChangedOrMissingShardsAreRefusedBeforeAnythingRuns) {
  ASSERT_TRUE(Submit(Spec("", NpyFeatures(""))).ok());
  // Shards named by the spec: a range reaching past the files.
  Status range = Submit(
      Spec(", path: '" + dir_.Sub("shards/train-{00000..00003}.tar") + "'", NpyFeatures("")));
  EXPECT_EQ(range.code(), StatusCode::kNotFound) << range.ToString();
  EXPECT_NE(range.message().find("train-00003.tar"), std::string::npos);
  EXPECT_TRUE(
      Submit(Spec(", path: '" + dir_.Sub("shards/train-{00000..00002}.tar") + "'", NpyFeatures("")))
          .ok());
  // A shard gone since indexing.
  fs::remove(dir_.Sub("shards/train-00001.tar"));
  Status gone = Submit(Spec("", NpyFeatures("")));
  EXPECT_EQ(gone.code(), StatusCode::kFailedPrecondition) << gone.ToString();
  EXPECT_NE(gone.message().find("spec.dataset.index"), std::string::npos);
  EXPECT_NE(gone.message().find("train-00001.tar"), std::string::npos);
}

TEST_F(SubmitTest, SpecRulesOfTheImageFormats) {
  // No index; pixel features; a bad crop range; a format mismatch.
  Status no_index = Submit(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  dataset: {format: image-folder}\n"
      "  clustering: {features: {kind: pixels}}\n  evaluation: {enabled: false}\n");
  EXPECT_EQ(no_index.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_index.message().find("mlcdctl dataset index"), std::string::npos);
  EXPECT_NE(no_index.message().find("made from fashion-mnist only"), std::string::npos);
  // A path but no index, and no coordinator data dir to build one in.
  Status unbuilt = Submit(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  dataset: {format: webdataset, path: '" +
      dir_.Sub("shards") + "'}\n  clustering: {k: 4, l: 2, features: " + NpyFeatures("") +
      "}\n  training: {batch_size: 8}\n  evaluation: {enabled: false}\n");
  EXPECT_EQ(unbuilt.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unbuilt.message().find("spec.dataset.index: empty"), std::string::npos)
      << unbuilt.message();
  Status crop = Submit(Spec(", crop_min_scale: 0.5, crop_max_scale: 0.2", NpyFeatures("")));
  EXPECT_NE(crop.message().find("crop_max_scale"), std::string::npos) << crop.message();
  Status mismatch = Submit(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  dataset: {format: image-folder, index: '" +
      dir_.Sub("idx") + "'}\n  clustering: {k: 4, l: 2, features: " + NpyFeatures("") +
      "}\n  training: {batch_size: 8}\n  evaluation: {enabled: false}\n");
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("indexes a webdataset dataset"), std::string::npos);
  // Evaluation of an image dataset needs a test split.
  Status eval = Submit(
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  dataset: {format: webdataset, index: '" +
      dir_.Sub("idx") + "'}\n  clustering: {k: 4, l: 2, features: " + NpyFeatures("") +
      "}\n  training: {batch_size: 8}\n");
  EXPECT_NE(eval.message().find("test_index"), std::string::npos) << eval.message();
  // k above the sample count.
  Status k =
      Submit(Spec("", "{kind: model}").replace(Spec("", "{kind: model}").find("k: 4"), 4, "k: 99"));
  EXPECT_NE(k.message().find("99 > the 24 samples"), std::string::npos) << k.message();
}

TEST_F(SubmitTest, TheCoordinatorIndexesADatasetGivenByPath) {
  const v1::SubmitJobRequest request = ByPath(dir_.Sub("shards/train-{00000..00002}.tar"));
  auto first = coordinator::ParseSubmission(request, dir_.Sub("coord"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string index = first->spec.dataset().index();
  EXPECT_EQ(index.rfind(dir_.Sub("coord/datasets/webdataset-"), 0), 0u) << index;
  auto loaded = LoadDatasetIndex(index);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->keys, keys_);
  // The same files: the same index, reused.
  auto again = coordinator::ParseSubmission(request, dir_.Sub("coord"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->spec.dataset().index(), index);
  // A changed shard: a new index; the old one (a running job's) refuses the change.
  std::ofstream(dir_.Sub("shards/train-00001.tar"), std::ios::app) << std::string(512, '\0');
  auto changed = coordinator::ParseSubmission(request, dir_.Sub("coord"));
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_NE(changed->spec.dataset().index(), index);
  EXPECT_EQ(LoadDatasetIndex(index).status().code(), StatusCode::kFailedPrecondition);
  // A missing shard is refused at submit, naming it.
  fs::remove(dir_.Sub("shards/train-00002.tar"));
  Status missing = coordinator::ParseSubmission(request, dir_.Sub("coord")).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  EXPECT_NE(missing.message().find("spec.dataset.path"), std::string::npos);
  EXPECT_NE(missing.message().find("train-00002.tar"), std::string::npos);
}

// The annotations.json beside the shards is part of what the coordinator's index is built
// from: a changed one gives a new index, and one the shards do not follow is refused at
// submit, naming the sample.
TEST_F(SubmitTest, TheCoordinatorsIndexFollowsTheAnnotationsBesideTheShards) {
  const v1::SubmitJobRequest request = ByPath(dir_.Sub("shards"));
  auto plain = coordinator::ParseSubmission(request, dir_.Sub("coord"));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE(WriteFileAtomically(dir_.Sub("shards/annotations.json"), "{}\n").ok());
  auto with_file = coordinator::ParseSubmission(request, dir_.Sub("coord"));
  ASSERT_TRUE(with_file.ok()) << with_file.status().ToString();
  EXPECT_NE(with_file->spec.dataset().index(), plain->spec.dataset().index());
  ASSERT_TRUE(
      WriteFileAtomically(dir_.Sub("shards/annotations.json"), R"({"labels": {"count": 3}})").ok());
  Status refused = coordinator::ParseSubmission(request, dir_.Sub("coord")).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("has no .labels member"), std::string::npos)
      << refused.message();
}

// The coordinator indexes an image folder only when every link in it stays under its data
// roots: a class folder holding a link to a file outside them is refused at submit, with the
// same message as a dangling link, before any index is written.
TEST_F(SubmitTest, AnImageFolderWithALinkOutsideTheRootsIsRefused) {
  TempDir outside;
  std::ofstream(outside.Sub("secret.png")) << "not yours";
  auto roots = DataRoots::Make({dir_.path()});
  ASSERT_TRUE(roots.ok());
  const std::string yaml =
      "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  dataset: {format: image-folder, path: '" +
      dir_.Sub("folder") +
      "'}\n  clustering: {k: 4, l: 2, features: {kind: model}}\n  training: {batch_size: 8}\n  "
      "evaluation: {enabled: "
      "false}\n";
  v1::SubmitJobRequest request;
  request.set_spec_yaml(yaml);
  request.set_dry_run(true);
  Status plain = coordinator::ParseSubmission(request, dir_.Sub("coord"), &*roots).status();
  ASSERT_TRUE(plain.ok()) << plain.ToString();
  const std::string cls = fs::directory_iterator(dir_.Sub("folder"))->path().string();
  const std::string link = cls + "/zz-link.png";
  ASSERT_EQ(::symlink(outside.Sub("secret.png").c_str(), link.c_str()), 0);
  Status exists = coordinator::ParseSubmission(request, dir_.Sub("coord2"), &*roots).status();
  EXPECT_EQ(exists.code(), StatusCode::kPermissionDenied) << exists.ToString();
  EXPECT_NE(exists.message().find(link + "' is not under a data root"), std::string::npos)
      << exists.ToString();
  EXPECT_EQ(exists.message().find(outside.path()), std::string::npos) << exists.ToString();
  fs::remove(outside.Sub("secret.png"));
  Status dangling = coordinator::ParseSubmission(request, dir_.Sub("coord2"), &*roots).status();
  EXPECT_EQ(dangling.ToString(), exists.ToString());
  EXPECT_FALSE(fs::exists(dir_.Sub("coord2/datasets")));
}

}  // namespace
}  // namespace mlcd
