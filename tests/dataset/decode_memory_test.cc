// The worker's ceiling on the decode memory (--max-decode-memory-mb, worker/data/
// decode_budget.h) in a real `mlcd-worker embed` child on an image folder made at test time:
// a spec cannot raise it; a ceiling too small for the spec's loader threads is refused with
// the numbers; the budget used is in the child's log.
#include <gtest/gtest.h>

#include "common/dataset/dataset_index.h"
#include "common/file_util.h"
#include "tests/dataset/image_data.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::BinPath;
using testing::RunCommand;
using testing::TempDir;

// 16 PNG images in class folders and their index; a spec of 8 loader threads that asks for
// `decode_memory_mb` (empty: the default).
class DecodeMemoryCeilingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ImageDataOptions o;
    o.count = 16;
    o.format = "png";
    o.rgb = true;
    o.size = 32;
    o.shards = 1;
    ASSERT_TRUE(testing::MakeImageDatasets(dir_.Sub("train"), o).ok());
    auto index = BuildDatasetIndex(DatasetFormat::kImageFolder, {dir_.Sub("train/folder")});
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    ASSERT_TRUE(WriteDatasetIndex(*index, dir_.Sub("train.idx")).ok());
  }

  std::string Spec(const std::string& decode_memory) {
    const std::string path = dir_.Sub("job" + decode_memory + ".yaml");
    const std::string extra = decode_memory.empty() ? "" : ", decode_memory_mb: " + decode_memory;
    EXPECT_TRUE(WriteFileAtomically(path,
                                    "apiVersion: mlcd/v1\nkind: TrainingJob\nspec:\n"
                                    "  dataset: {format: image-folder, index: '" +
                                        dir_.Sub("train.idx") + "', loader_threads: 8" + extra +
                                        "}\n"
                                        "  clustering: {features: {kind: model}, k: 10, l: 2}\n"
                                        "  model: {width: 32, depth: 1, heads: 2, embed_dim: 24, "
                                        "patch_size: 8, image_size: 32}\n"
                                        "  training: {batch_size: 16, threads_per_worker: 1}\n"
                                        "  evaluation: {enabled: false}\n")
                    .ok());
    return path;
  }

  TempDir dir_;
};

// 8 threads x 16 MiB = 128 MiB do not fit a ceiling of 64 MiB, whatever the spec asks: the
// child fails before decoding anything, and its error event names the numbers.
TEST_F(DecodeMemoryCeilingTest, ACeilingTooSmallForTheLoaderThreadsFailsWithTheNumbers) {
  std::string out;
  EXPECT_NE(RunCommand(BinPath("mlcd-worker"),
                       {"embed", "--spec", Spec("1048576"), "--out", dir_.Sub("emb"),
                        "--max-decode-memory-mb", "64", "--progress-jsonl", dir_.Sub("p.jsonl")},
                       &out),
            0)
      << out;
  const std::string expected =
      "RESOURCE_EXHAUSTED: dataset.index: dataset.loader_threads 8 need 8 x 16 MiB = 128 MiB of "
      "decode memory, but this worker's decode budget is 64 MiB (dataset.decode_memory_mb "
      "1048576 lowered to the worker's --max-decode-memory-mb 64); use at most 4 loader "
      "threads, or raise --max-decode-memory-mb on the worker agent";
  EXPECT_NE(out.find(expected), std::string::npos) << out;
  auto progress = ReadFileToString(dir_.Sub("p.jsonl"));
  ASSERT_TRUE(progress.ok());
  EXPECT_NE(progress->find("\"event\":\"error\""), std::string::npos) << *progress;
  EXPECT_NE(progress->find("128 MiB of decode memory"), std::string::npos) << *progress;
  EXPECT_FALSE(PathExists(dir_.Sub("emb/embeddings-00000-of-00001.npy")));
}

// A spec asking for more than the ceiling runs within the ceiling, and says so; one below it
// gets what it asked for.
TEST_F(DecodeMemoryCeilingTest, ASpecAskingForMoreRunsWithinTheCeilingAndTheLogSaysSo) {
  std::string out;
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"embed", "--spec", Spec("4096"), "--out", dir_.Sub("capped"),
                        "--max-decode-memory-mb", "200"},
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("dataset.index: 8 loader threads share 200 MiB of decode memory "
                     "(dataset.decode_memory_mb 4096 lowered to the worker's "
                     "--max-decode-memory-mb 200); the spec cannot raise the worker's bounds"),
            std::string::npos)
      << out;
  EXPECT_TRUE(PathExists(dir_.Sub("capped/embeddings-00000-of-00001.npy")));
  ASSERT_EQ(RunCommand(BinPath("mlcd-worker"),
                       {"embed", "--spec", Spec(""), "--out", dir_.Sub("default"),
                        "--max-decode-memory-mb", "2048"},
                       &out),
            0)
      << out;
  // (Lowered further only on a host with less than 4 GiB available.)
  EXPECT_NE(out.find("MiB of decode memory (dataset.decode_memory_mb 1024"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace mlcd
