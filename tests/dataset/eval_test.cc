// `mlcd-worker eval` and `embed` (what `mlcdctl eval` and EXTRACTING run) on image-folder
// splits made at test time: class folders of JPEG/PNG/WebP Fashion-MNIST images, train and
// test indexes, RGB at 32 pixels.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/dataset/dataset_index.h"
#include "common/file_util.h"
#include "tests/dataset/image_data.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::BinPath;
using testing::RunCommand;
using testing::TempDir;

TEST(DatasetEvalTest, EvalAndEmbedRunOnImageFolderSplits) {
  TempDir dir;
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", 120}, {"test", 60}}) {
    testing::ImageDataOptions o;
    o.count = count;
    o.split = split;
    o.format = "mixed";
    o.rgb = true;
    o.size = 32;
    o.shards = 1;
    ASSERT_TRUE(testing::MakeImageDatasets(dir.Sub(split), o).ok());
    auto index = BuildDatasetIndex(DatasetFormat::kImageFolder, {dir.Sub(split + "/folder")});
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    ASSERT_EQ(index->classes.size(), 10u);
    ASSERT_TRUE(WriteDatasetIndex(*index, dir.Sub(split + ".idx")).ok());
  }
  const std::string dataset = "{format: image-folder, index: '" + dir.Sub("train.idx") +
                              "', test_index: '" + dir.Sub("test.idx") + "'}";
  ASSERT_TRUE(WriteFileAtomically(
                  dir.Sub("job.yaml"),
                  "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n  dataset: " + dataset +
                      "\n  clustering: {features: {kind: model}, k: 10, l: 2}\n"
                      "  model: {width: 32, depth: 1, heads: 2, embed_dim: 24, patch_size: 8, "
                      "image_size: 32}\n"
                      "  training: {batch_size: 20}\n  evaluation: {dataset: " +
                      dataset + "}\n")
                  .ok());
  std::string out;
  ASSERT_EQ(
      RunCommand(BinPath("mlcd-worker"),
                 {"eval", "--spec", dir.Sub("job.yaml"), "--random-init", "--out", dir.Sub("eval")},
                 &out),
      0)
      << out;
  EXPECT_NE(out.find("linear probe"), std::string::npos) << out;
  auto text = ReadFileToString(dir.Sub("eval/evaluation.json"));
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << *text;
  EXPECT_EQ(j["train_samples"], "120");
  EXPECT_EQ(j["test_samples"], "60");
  // Extraction of the train split: one row per sample of the index.
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"embed", "--spec", dir.Sub("job.yaml"), "--out", dir.Sub("emb")}, &out),
            0)
      << out;
  EXPECT_NE(out.find("120"), std::string::npos) << out;
}

}  // namespace
}  // namespace mlcd
