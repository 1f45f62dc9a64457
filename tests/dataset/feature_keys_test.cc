// Features aligned to a dataset index by a keys file (common/dataset/feature_keys.h):
// shuffled rows with their keys give the same features per sample as ordered rows; count
// mismatches, unknown and duplicate keys are INVALID_ARGUMENT naming file, row and counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "common/dataset/dataset_index.h"
#include "common/dataset/feature_keys.h"
#include "common/file_util.h"
#include "common/npy.h"
#include "common/random.h"
#include "tests/dataset/image_data.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::TempDir;

class FeatureKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ImageDataOptions o;
    o.count = 24;
    o.shards = 2;
    ASSERT_TRUE(testing::MakeImageDatasets(dir_.path(), o).ok());
    auto index = BuildDatasetIndex(DatasetFormat::kWebDataset, {dir_.Sub("shards")});
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = std::move(*index);
  }
  void WriteKeys(const std::string& path, const std::vector<std::string>& keys) {
    std::ofstream out(path);
    for (const auto& k : keys) out << k << "\n";
  }
  TempDir dir_;
  DatasetIndex index_;
};

TEST_F(FeatureKeysTest, ShuffledKeysGiveTheSameFeaturesPerSample) {
  const int64_t n = index_.size(), d = 3;
  // Feature of sample s: (s, 2s, 3s). Shuffled file: row r holds sample perm[r].
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  SplitMix rng(7);
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.Next() % (i + 1)]);
  std::vector<float> rows(static_cast<size_t>(n * d));
  std::vector<std::string> keys;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < d; ++j) rows[r * d + j] = static_cast<float>(perm[r] * (j + 1));
    keys.push_back(index_.keys[perm[r]]);
  }
  // Two shards (split 10 + 14), float16 and float32.
  ASSERT_TRUE(MakeDirs(dir_.Sub("feats")).ok());
  std::vector<uint16_t> half(rows.begin(), rows.begin() + 10 * d);
  for (size_t i = 0; i < half.size(); ++i) half[i] = FloatToHalf(rows[i]);
  ASSERT_TRUE(WriteNpy(dir_.Sub("feats/a.npy"), NpyDtype::kFloat16, {10, d}, half.data()).ok());
  ASSERT_TRUE(
      WriteNpy(dir_.Sub("feats/b.npy"), NpyDtype::kFloat32, {n - 10, d}, &rows[10 * d]).ok());
  WriteKeys(dir_.Sub("keys.txt"), keys);
  auto shards = ListNpyShardRows({dir_.Sub("feats")});
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();
  ASSERT_EQ(shards->size(), 2u);
  auto aligned = AlignFeatureKeys(index_, dir_.Sub("keys.txt"), n);
  ASSERT_TRUE(aligned.ok()) << aligned.status().ToString();
  EXPECT_EQ(*aligned, perm);
  // The ids files clusterd reads: row r of the shards is sample perm[r].
  auto ids = WriteFeatureIds(*aligned, *shards, dir_.Sub("ids"));
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  auto a = ReadNpyAsInt64((*ids)[0]);
  auto b = ReadNpyAsInt64((*ids)[1]);
  ASSERT_TRUE(a.ok() && b.ok());
  a->insert(a->end(), b->begin(), b->end());
  EXPECT_EQ(*a, perm);
  // Every sample's features, gathered through the ids, equal the ordered file's.
  for (int64_t r = 0; r < n; ++r) EXPECT_EQ(rows[r * d + 1], 2.0f * (*a)[r]);
  // Ordered features need no keys: counts agree.
  EXPECT_TRUE(CheckFeatureRows(index_, *shards).ok());
}

TEST_F(FeatureKeysTest, MismatchUnknownAndDuplicateKeysNameFileRowAndCounts) {
  const int64_t n = index_.size();
  std::vector<std::string> keys = index_.keys;
  // One key short.
  WriteKeys(dir_.Sub("short.txt"), std::vector<std::string>(keys.begin(), keys.end() - 1));
  auto s = AlignFeatureKeys(index_, dir_.Sub("short.txt"), n);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("short.txt row 23"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("23 keys for 24 feature rows and 24 samples"),
            std::string::npos)
      << s.status().message();
  // A key the index does not know.
  std::vector<std::string> unknown = keys;
  unknown[5] = "no-such-key";
  WriteKeys(dir_.Sub("unknown.txt"), unknown);
  auto u = AlignFeatureKeys(index_, dir_.Sub("unknown.txt"), n);
  EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(u.status().message().find("unknown.txt row 5: key 'no-such-key'"), std::string::npos)
      << u.status().message();
  EXPECT_NE(u.status().message().find("24 keys for 24 feature rows"), std::string::npos);
  // A key twice.
  std::vector<std::string> dup = keys;
  dup[9] = keys[2];
  WriteKeys(dir_.Sub("dup.txt"), dup);
  auto d = AlignFeatureKeys(index_, dir_.Sub("dup.txt"), n);
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("dup.txt row 9"), std::string::npos);
  EXPECT_NE(d.status().message().find("duplicate of row 2"), std::string::npos);
  // Features without keys must number the samples.
  std::vector<float> rows(static_cast<size_t>((n - 1) * 2), 1.0f);
  ASSERT_TRUE(WriteNpy(dir_.Sub("f.npy"), NpyDtype::kFloat32, {n - 1, 2}, rows.data()).ok());
  auto shards = ListNpyShardRows({dir_.Sub("f.npy")});
  ASSERT_TRUE(shards.ok());
  Status c = CheckFeatureRows(index_, *shards);
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.message().find("23 rows but the dataset index has 24 samples"), std::string::npos)
      << c.message();
  EXPECT_EQ(ListNpyShardRows({dir_.Sub("nope.npy")}).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlcd
