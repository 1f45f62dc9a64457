// The label store's on-disk format (labelstore/block_format.h), without RocksDB.
#include "labelstore/block_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace mlcd::labelstore {
namespace {

TEST(BlockFormat, KeysAreBigEndianAndRangesCoverASet) {
  char key[kBlockKeyBytes];
  EncodeBlockKey(key, 0x0102030405060708ull, 9);
  EXPECT_EQ(std::string(key, 8), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(GetBigEndian64(key + 8), 9u);
  auto [begin, end] = SetKeyRange(5);
  EncodeBlockKey(key, 5, ~uint64_t{0});
  EXPECT_LE(begin, std::string(key, kBlockKeyBytes));
  EXPECT_LT(std::string(key, kBlockKeyBytes), end);
  EncodeBlockKey(key, 6, 0);
  EXPECT_GE(std::string(key, kBlockKeyBytes), end);
}

TEST(BlockFormat, SetRecordRoundTrip) {
  v1::LabelSetInfo info;
  info.set_name("job/1/r0");
  info.set_labels_per_sample(8);
  const std::string record = EncodeSetRecord(42, 4096, info);
  EXPECT_EQ(record.substr(0, 4), "LSR1");
  SetRecord decoded;
  ASSERT_TRUE(DecodeSetRecord(record.data(), record.size(), &decoded));
  EXPECT_EQ(decoded.set_id, 42u);
  EXPECT_EQ(decoded.block_rows, 4096);
  EXPECT_EQ(decoded.info.name(), "job/1/r0");
  EXPECT_FALSE(DecodeSetRecord(record.data(), 10, &decoded));
  std::string bad = record;
  bad[0] = 'X';
  EXPECT_FALSE(DecodeSetRecord(bad.data(), bad.size(), &decoded));
}

TEST(BlockFormat, ChooseBlockRows) {
  // 128 KiB of l = 8 int32 rows: 4096 rows.
  EXPECT_EQ(ChooseBlockRows(128 << 10, 8, false), 4096);
  EXPECT_EQ(ChooseBlockRows(128 << 10, 8, true), 2048);
  EXPECT_EQ(ChooseBlockRows(1, 1024, true), kMinBlockRows);
  EXPECT_EQ(ChooseBlockRows(size_t{1} << 40, 1, false), kMaxBlockRows);
  EXPECT_TRUE(ValidBlockRows(64));
  EXPECT_FALSE(ValidBlockRows(32));
  EXPECT_FALSE(ValidBlockRows(96));
}

TEST(BlockFormat, DenseRoundTripAndRowLookup) {
  const BlockLayout layout{128, 2, true};
  DenseBlock dense;
  dense.Reset(layout);
  const int32_t labels_a[2] = {3, 4}, labels_b[2] = {5, 6}, labels_c[2] = {7, 8};
  const float scores_a[2] = {0.5f, 0.25f}, scores_b[2] = {1, 2}, scores_c[2] = {3, 4};
  EXPECT_TRUE(dense.SetRow(layout, 70, labels_b, scores_b));
  EXPECT_TRUE(dense.SetRow(layout, 1, labels_a, scores_a));
  EXPECT_FALSE(dense.SetRow(layout, 70, labels_c, scores_c));  // overwrites
  EXPECT_EQ(dense.present, 2u);

  std::string encoded;
  EncodeDense(dense, layout, &encoded);
  EXPECT_EQ(encoded.size(), layout.encoded_bytes(2));
  BlockView view;
  ASSERT_TRUE(ParseBlock(encoded.data(), encoded.size(), layout, &view));
  EXPECT_EQ(view.present, 2u);
  EXPECT_EQ(FindRow(view, 1), 0);
  EXPECT_EQ(FindRow(view, 70), 1);
  EXPECT_EQ(FindRow(view, 0), -1);
  EXPECT_EQ(FindRow(view, 127), -1);
  int32_t label;
  std::memcpy(&label, view.labels + 1 * 2 * 4, 4);
  EXPECT_EQ(label, 7);
  float score;
  std::memcpy(&score, view.scores + 4, 4);
  EXPECT_EQ(score, 0.25f);

  DenseBlock back;
  ASSERT_TRUE(DecodeDense(encoded.data(), encoded.size(), layout, &back));
  EXPECT_EQ(back.present, 2u);
  EXPECT_EQ(back.bits, dense.bits);
  EXPECT_EQ(back.labels, dense.labels);
  EXPECT_EQ(back.scores, dense.scores);

  // Sizes other than the one `present` implies are corrupt.
  EXPECT_FALSE(ParseBlock(encoded.data(), encoded.size() - 1, layout, &view));
  EXPECT_FALSE(DecodeDense(encoded.data(), encoded.size(), BlockLayout{128, 2, false}, &back));
}

}  // namespace
}  // namespace mlcd::labelstore
