// Whole jobs on a WebDataset copy of Fashion-MNIST (and vit-b32 at 224 RGB on an image folder)
// through real services (mlcd-labelstore,
// mlcd-clusterd, mlcd-coordinator, two `mlcd-worker agent` slots): shards indexed by the
// coordinator, CLIP-style npy features in reversed row order aligned by a keys file (clustered
// by clusterd and by the gang engine), bad
// images skipped and counted to SUCCEEDED, and too many bad images failing the job with
// their keys.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "clients/labelstore_client.h"
#include "common/dataset/dataset_index.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "tests/coordinator/harness.h"
#include "tests/dataset/image_data.h"

namespace mlcd {
namespace {

using std::chrono::seconds;
using testing::TempDir;
using testing::TestCluster;

constexpr int kGood = 64;
constexpr int kSamples = kGood + 4;  // + the generator's four bad samples
constexpr int kDim = 8;

class DatasetJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ImageDataOptions o;
    o.count = kGood;
    o.bad = true;
    ASSERT_TRUE(testing::MakeImageDatasets(dir_.Sub("data"), o).ok());
    auto index = BuildDatasetIndex(DatasetFormat::kWebDataset,
                                   {dir_.Sub("data/shards/train-{00000..00003}.tar")});
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    ASSERT_EQ(index->size(), kSamples);
    ASSERT_TRUE(WriteDatasetIndex(*index, dir_.Sub("idx")).ok());
    // Features: sample s of class c sits near the c-th axis (bad samples: axis 0); rows in
    // reversed sample order with their keys, as a clip-retrieval dump in its own order.
    const std::vector<std::string> labels = testing::ReadLines(dir_.Sub("data/labels.txt"));
    std::vector<float> rows;
    std::ofstream keys(dir_.Sub("keys.txt"));
    for (int r = 0; r < kSamples; ++r) {
      const int s = kSamples - 1 - r;
      const int c = s < kGood ? std::stoi(labels[s]) % kDim : 0;
      for (int j = 0; j < kDim; ++j) rows.push_back(j == c ? 1.0f : 0.01f * ((s + j) % 5));
      keys << index->keys[s] << "\n";
    }
    ASSERT_TRUE(
        WriteNpy(dir_.Sub("emb.npy"), NpyDtype::kFloat32, {kSamples, kDim}, rows.data()).ok());
    cluster_ = std::make_unique<TestCluster>(dir_);
    ASSERT_TRUE(cluster_->StartServices().ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->StartWorker(0, WorkerEnv()).ok());
    ASSERT_TRUE(cluster_->StartWorker(1, WorkerEnv()).ok());
    ASSERT_TRUE(cluster_->WaitForIdleWorkers(2, seconds(30)).ok()) << cluster_->Logs();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->Logs();
  }
  // The agents' environment beyond the harness's.
  virtual std::vector<std::string> WorkerEnv() const { return {}; }

  // Two ranks of 17 samples: one epoch of two steps reads every sample.
  // `prebuilt`: the test's own index; otherwise the coordinator indexes the shards itself.
  std::string Yaml(const std::string& name, double max_bad_fraction, bool prebuilt) const {
    return "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata: {name: " + name +
           "}\nspec:\n"
           "  dataset: {format: webdataset, path: '" +
           dir_.Sub("data/shards/train-{00000..00003}.tar") + "'" +
           (prebuilt ? ", index: '" + dir_.Sub("idx") + "'" : std::string()) +
           ", max_bad_fraction: " + std::to_string(max_bad_fraction) +
           ", loader_threads: 2, crop_min_scale: 0.5}\n"
           "  clustering: {features: {kind: npy, paths: ['" +
           dir_.Sub("emb.npy") + "'], keys: '" + dir_.Sub("keys.txt") +
           "'}, k: 8, l: 2, niter: 4}\n"
           "  loss: {variant: mlcd, sample_ratio: 0.5}\n"
           "  model: {width: 32, depth: 1, heads: 2, embed_dim: 32, patch_size: 7, image_size: "
           "28, channels: 1}\n"
           "  training: {world_size: 2, batch_size: 34, epochs_per_round: 1, "
           "threads_per_worker: 1, max_restarts: 0, seed: 3}\n"
           "  evaluation: {enabled: false}\n";
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(DatasetJobTest, KeyAlignedFeaturesAndBadImagesRunToSucceeded) {
  auto job = cluster_->Submit(Yaml("wds", 0.1, /*prebuilt=*/false));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto done = cluster_->WaitForJob(
      job->id(), [](const v1::Job& j) { return testing::IsTerminal(j.state()); }, seconds(180));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message();
  ASSERT_EQ(done->rounds_size(), 1);
  EXPECT_EQ(
      done->spec().dataset().index().rfind(cluster_->coordinator_data_dir() + "/datasets/", 0), 0u)
      << done->spec().dataset().index();
  EXPECT_EQ(done->rounds(0).feature_ids_paths_size(), 1);
  EXPECT_NE(done->rounds(0).feature_source().find("aligned by"), std::string::npos);
  // Every bad image was met by one of the ranks, logged with its key.
  std::string logs;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.Sub("workers"))) {
    if (e.path().filename() != "worker.log") continue;
    auto text = ReadFileToString(e.path().string());
    if (text.ok()) logs += *text;
  }
  for (int b = 0; b < 4; ++b) {
    EXPECT_NE(logs.find("('zzbad-" + std::to_string(b) + "') skipped"), std::string::npos)
        << "zzbad-" << b;
  }
  // ... and are on the job record (one epoch: each image was met once), as `mlcdctl get` and
  // `-o json` show them: the round's count and the first keys.
  const std::set<std::string> bad_keys = {"zzbad-0", "zzbad-1", "zzbad-2", "zzbad-3"};
  const v1::BadSamples& bad = done->rounds(0).bad_samples();
  EXPECT_EQ(bad.count(), 4);
  EXPECT_EQ(std::set<std::string>(bad.first_keys().begin(), bad.first_keys().end()), bad_keys);
  const std::string flag = "--coordinator=" + cluster_->coordinator_address();
  std::string out;
  ASSERT_EQ(testing::RunCommand(testing::BinPath("mlcdctl"), {flag, "get", done->id()}, &out), 0)
      << out;
  EXPECT_NE(out.find("bad       4 images skipped as unreadable (first: zzbad-"), std::string::npos)
      << out;
  ASSERT_EQ(testing::RunCommand(testing::BinPath("mlcdctl"),
                                {flag, "-o", "json", "get", done->id()}, &out),
            0)
      << out;
  auto got = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(got.is_discarded()) << out;
  const auto& json_bad = got["rounds"][0]["bad_samples"];
  EXPECT_EQ(json_bad["count"], "4") << out;  // int64 as a string, protobuf JSON's way
  std::set<std::string> json_keys;
  for (const auto& k : json_bad["first_keys"]) json_keys.insert(k.get<std::string>());
  EXPECT_EQ(json_keys, bad_keys) << out;
}

TEST_F(DatasetJobTest, TooManyBadImagesFailTheJobNamingThem) {
  auto job = cluster_->Submit(Yaml("wds-bad", 0.01, /*prebuilt=*/true));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto done = cluster_->WaitForJob(
      job->id(), [](const v1::Job& j) { return testing::IsTerminal(j.state()); }, seconds(180));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(done->message().find("too many bad images"), std::string::npos) << done->message();
  EXPECT_NE(done->message().find("zzbad-"), std::string::npos) << done->message();
}

// Agents whose decode-memory ceiling (--max-decode-memory-mb, here MLCD_MAX_DECODE_MEMORY_MB)
// is 64 MiB: a spec asking for 1 TiB of decode memory and 8 loader threads (8 x 16 MiB = 128
// MiB) fails the job with the numbers, before any image is decoded.
class DecodeCeilingJobTest : public DatasetJobTest {
 protected:
  std::vector<std::string> WorkerEnv() const override { return {"MLCD_MAX_DECODE_MEMORY_MB=64"}; }
};

TEST_F(DecodeCeilingJobTest, TheAgentsCeilingBoundsTheSpecsDecodeMemory) {
  std::string yaml = Yaml("wds-decode", 0.1, /*prebuilt=*/true);
  const std::string threads = "loader_threads: 2";
  ASSERT_NE(yaml.find(threads), std::string::npos);
  yaml.replace(yaml.find(threads), threads.size(), "loader_threads: 8, decode_memory_mb: 1048576");
  auto job = cluster_->Submit(yaml);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto done = cluster_->WaitForJob(
      job->id(), [](const v1::Job& j) { return testing::IsTerminal(j.state()); }, seconds(180));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(done->message().find(
                "dataset.loader_threads 8 need 8 x 16 MiB = 128 MiB of decode memory, but this "
                "worker's decode budget is 64 MiB (dataset.decode_memory_mb 1048576 lowered to "
                "the worker's --max-decode-memory-mb 64)"),
            std::string::npos)
      << done->message();
}

// The gang engine on the same key-aligned features: each rank reads its range of the sample-id
// file the coordinator wrote from the keys, so the label set's row of sample s holds the labels
// one process gives feature row kSamples - 1 - s (the rows are in reversed sample order).
TEST_F(DatasetJobTest, KeyAlignedFeaturesOnTheGangEngineLabelTheSamplesTheKeysName) {
  std::string yaml = Yaml("wds-gang", 0.1, /*prebuilt=*/true);
  const std::string plain = "k: 8, l: 2, niter: 4}";
  ASSERT_NE(yaml.find(plain), std::string::npos);
  yaml.replace(yaml.find(plain), plain.size(), "k: 8, l: 2, niter: 4, engine: gang, seed: 5}");
  auto job = cluster_->Submit(yaml);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto done = cluster_->WaitForJob(
      job->id(), [](const v1::Job& j) { return testing::IsTerminal(j.state()); }, seconds(180));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message();
  ASSERT_EQ(done->rounds(0).feature_ids_paths_size(), 1);
  ASSERT_EQ(done->rounds(0).assign().num_samples(), static_cast<uint64_t>(kSamples));

  std::string log;
  ASSERT_EQ(testing::RunCommand(testing::BinPath("mlcd-worker"),
                                {"cluster-gang", "--features", dir_.Sub("emb.npy"), "--k", "8",
                                 "--l", "2", "--niter", "4", "--seed", "5", "--out",
                                 dir_.Sub("one-process"), "--threads", "1"},
                                &log),
            0)
      << log;
  auto by_row = ReadNpyAsInt64(dir_.Sub("one-process/labels.r0.npy"));
  ASSERT_TRUE(by_row.ok()) << by_row.status().ToString();
  ASSERT_EQ(by_row->size(), static_cast<size_t>(kSamples * 2));
  labelstore::LabelStoreClient store(cluster_->labelstore_address());
  std::vector<uint64_t> ids(kSamples);
  for (int s = 0; s < kSamples; ++s) ids[s] = static_cast<uint64_t>(s);
  auto stored = store.GetLabels(done->rounds(0).label_set(), ids);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(stored->missing_indices.empty()) << stored->missing_indices.size() << " missing";
  for (int s = 0; s < kSamples; ++s) {
    const int r = kSamples - 1 - s;
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(stored->labels[s * 2 + j], (*by_row)[r * 2 + j])
          << "sample " << s << " (feature row " << r << "), label " << j;
    }
  }
}

// The paper's 224-pixel presets really run: vit-b32 (88 M parameters, 7x7 patches of 32 px)
// on RGB images through a whole job, two optimizer steps on the CPU, checkpoint included.
class PresetJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ImageDataOptions o;
    o.count = 16;
    o.rgb = true;
    o.size = 48;
    ASSERT_TRUE(testing::MakeImageDatasets(dir_.Sub("data"), o).ok());
    std::vector<float> rows;
    for (int s = 0; s < 16; ++s) {
      for (int j = 0; j < kDim; ++j) rows.push_back(j == s % 4 ? 1.0f : 0.01f * ((s + j) % 5));
    }
    ASSERT_TRUE(WriteNpy(dir_.Sub("emb.npy"), NpyDtype::kFloat32, {16, kDim}, rows.data()).ok());
    cluster_ = std::make_unique<TestCluster>(dir_);
    ASSERT_TRUE(cluster_->StartServices().ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->StartWorker(0).ok());
    ASSERT_TRUE(cluster_->WaitForIdleWorkers(1, seconds(30)).ok()) << cluster_->Logs();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->Logs();
  }
  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(PresetJobTest, VitB32At224RgbTrainsTwoSteps) {
  const std::string yaml =
      "apiVersion: mlcd/v1\nkind: TrainingJob\nmetadata: {name: b32}\nspec:\n"
      "  dataset: {format: image-folder, path: '" +
      dir_.Sub("data/folder") +
      "', loader_threads: 2}\n"
      "  clustering: {features: {kind: npy, paths: ['" +
      dir_.Sub("emb.npy") +
      "']}, k: 4, l: 2, niter: 4}\n"
      "  loss: {variant: mlcd, sample_ratio: 1.0}\n"
      "  model: {preset: vit-b32, channels: 3}\n"
      "  training: {world_size: 1, batch_size: 4, epochs_per_round: 1, max_steps_per_epoch: 2, "
      "threads_per_worker: 2, max_restarts: 0, seed: 5}\n"
      "  evaluation: {enabled: false}\n";
  auto job = cluster_->Submit(yaml);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto done = cluster_->WaitForJob(
      job->id(), [](const v1::Job& j) { return testing::IsTerminal(j.state()); }, seconds(300));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->message();
  EXPECT_EQ(done->spec().model().image_size(), 224);
  EXPECT_EQ(done->spec().model().width(), 768);
  EXPECT_EQ(done->spec().model().patch_size(), 32);
  ASSERT_EQ(done->rounds_size(), 1);
  EXPECT_EQ(done->rounds(0).checkpoint_global_step(), 2) << done->rounds(0).DebugString();
}

}  // namespace
}  // namespace mlcd
