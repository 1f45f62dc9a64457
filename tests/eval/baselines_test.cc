// The baselines' cache key (worker/eval/baselines.h): equal for equal inputs, different when
// what decides a baseline's result changes, including a dataset rewritten in place.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/file_util.h"
#include "tests/testing/process.h"
#include "worker/eval/baselines.h"

namespace mlcd::testing {
namespace {

using worker::BaselineCacheKey;

worker::EvaluationOptions Options(const std::string& dataset_dir) {
  worker::EvaluationOptions o;
  o.has_spec = true;
  o.spec.mutable_dataset()->set_format("fashion-mnist");
  o.spec.mutable_dataset()->set_path(dataset_dir);
  *o.spec.mutable_evaluation()->mutable_dataset() = o.spec.dataset();
  return o;
}

std::string Key(const worker::EvaluationOptions& o, const std::string& name) {
  auto key = BaselineCacheKey(o, name);
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  return key.ok() ? *key : "";
}

TEST(BaselineCacheKeyTest, ChangesWithTheDatasetFilesAndSettings) {
  TempDir dir;
  const std::string data = dir.Sub("data");
  std::filesystem::create_directories(data);
  ASSERT_TRUE(WriteFileAtomically(data + "/train-images-idx3-ubyte", "0123456789").ok());
  const auto o = Options(data);
  const std::string raw = Key(o, "raw-pixels");
  const std::string random = Key(o, "random-init");
  ASSERT_FALSE(raw.empty());
  EXPECT_NE(raw, random);
  EXPECT_EQ(Key(o, "raw-pixels"), raw) << "the key must be stable";

  // A file of the dataset rewritten in place (same name, other size).
  ASSERT_TRUE(WriteFileAtomically(data + "/train-images-idx3-ubyte", "01234567890123").ok());
  const std::string rewritten = Key(o, "raw-pixels");
  EXPECT_NE(rewritten, raw);

  // Same size, later modification time.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(WriteFileAtomically(data + "/train-images-idx3-ubyte", "abcdefghijklmn").ok());
  const auto now = std::filesystem::file_time_type::clock::now();
  std::filesystem::last_write_time(data + "/train-images-idx3-ubyte", now);
  const std::string touched = Key(o, "raw-pixels");
  EXPECT_NE(touched, rewritten);

  // A file added to the folder.
  ASSERT_TRUE(WriteFileAtomically(data + "/t10k-images-idx3-ubyte", "x").ok());
  EXPECT_NE(Key(o, "raw-pixels"), touched);

  // Settings: the probe's train limit; the model only for random-init.
  auto limited = o;
  limited.train_limit = 123;
  EXPECT_NE(Key(limited, "raw-pixels"), Key(o, "raw-pixels"));
  auto wider = o;
  wider.spec.mutable_model()->set_embed_dim(64);
  EXPECT_EQ(Key(wider, "raw-pixels"), Key(o, "raw-pixels"));
  EXPECT_NE(Key(wider, "random-init"), Key(o, "random-init"));
}

}  // namespace
}  // namespace mlcd::testing
