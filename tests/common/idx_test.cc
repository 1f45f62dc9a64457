#include "common/idx.h"

#include <gtest/gtest.h>

#include <set>

#include "common/file_util.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

// The set-up installs dataset-fashion-mnist; this reads the real files.
TEST(Idx, ReadsFashionMnistFromTheDebianPackage) {
  std::string images, labels;
  ASSERT_TRUE(FindMnistSplit(kFashionMnistDir, "test", &images, &labels).ok());
  auto imgs = ReadIdxImages(images, 100);
  ASSERT_TRUE(imgs.ok()) << imgs.status().ToString();
  EXPECT_EQ(imgs->count, 100);
  EXPECT_EQ(imgs->rows, 28);
  EXPECT_EQ(imgs->cols, 28);
  EXPECT_EQ(imgs->pixels.size(), 100u * 28 * 28);
  auto labs = ReadIdxLabels(labels);
  ASSERT_TRUE(labs.ok());
  EXPECT_EQ(labs->size(), 10000u);
  std::set<int> classes(labs->begin(), labs->end());
  EXPECT_EQ(classes.size(), 10u);
  EXPECT_EQ(*classes.rbegin(), 9);
}

TEST(Idx, RejectsWrongMagicAndTruncation) {
  testing::TempDir dir;
  std::string header("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02", 16);
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("short"), header + "abc").ok());
  EXPECT_EQ(ReadIdxImages(dir.Sub("short")).status().code(), StatusCode::kDataLoss);
  ASSERT_TRUE(
      WriteFileAtomically(dir.Sub("labels"), std::string("\x00\x00\x08\x01\x00\x00\x00\x01\x05", 9))
          .ok());
  EXPECT_EQ(ReadIdxImages(dir.Sub("labels")).status().code(), StatusCode::kInvalidArgument);
  auto l = ReadIdxLabels(dir.Sub("labels"));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)[0], 5);
  EXPECT_EQ(FindMnistSplit(dir.path(), "train", nullptr, nullptr).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlcd
