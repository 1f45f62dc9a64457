// TensorBoard event files (common/event_file.h) and their CRC-32C (common/crc32c.h): the CRC
// against published vectors (RFC 3720 B.4, the check value of the catalogue of CRCs), the
// masking TensorFlow applies, a record round trip through our reader, and what a reader does
// with a last record cut short (a writer killed mid-write) and with a damaged record.
// TensorBoard's own reader is run on our files by tests/interop/tensorboard_test.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/event_file.h"
#include "common/file_util.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::TempDir;

TEST(Crc32cTest, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc32c(check.data(), check.size()), 0xE3069283u);
  std::vector<unsigned char> buf(32, 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xff);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32cTest, ExtendsAndMasks) {
  const std::string a = "hello ", b = "world";
  const std::string ab = a + b;
  EXPECT_EQ(Crc32c(b.data(), b.size(), Crc32c(a.data(), a.size())), Crc32c(ab.data(), ab.size()));
  const uint32_t crc = Crc32c(ab.data(), ab.size());
  EXPECT_NE(MaskCrc32c(crc), crc);
  EXPECT_NE(MaskCrc32c(MaskCrc32c(crc)), crc);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
  EXPECT_EQ(UnmaskCrc32c(UnmaskCrc32c(MaskCrc32c(MaskCrc32c(crc)))), crc);
  // TensorFlow's mask of 0: rotate (no-op) + 0xa282ead8.
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
}

TEST(EventRecordTest, FramingByHand) {
  const std::string payload = "abc";
  const std::string r = FrameEventRecord(payload);
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(r.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(r[at + i])} << (8 * i);
    return v;
  };
  EXPECT_EQ(UnmaskCrc32c(le32(8)), Crc32c(r.data(), 8));
  EXPECT_EQ(r.substr(12, 3), payload);
  EXPECT_EQ(UnmaskCrc32c(le32(15)), Crc32c(payload.data(), payload.size()));
}

std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("events.out.tfevents.", 0) == 0) out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  return out;
}

TEST(EventFileTest, RoundTripOfScalars) {
  TempDir tmp;
  const std::string dir = tmp.Sub("tb/train");
  std::string path;
  {
    auto w = EventFileWriter::Create(dir, "train");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    path = (*w)->path();
    ASSERT_TRUE((*w)->WriteScalars(0, {{"train/loss", 0.0f}, {"train/lr", 1e-3f}}).ok());
    ASSERT_TRUE((*w)->WriteScalars(10, {{"train/loss", 2.5f}}).ok());
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_FALSE((*w)->WriteScalars(20, {{"train/loss", 1.0f}}).ok());
  }
  ASSERT_EQ(EventFiles(dir), std::vector<std::string>{path});
  const std::string name = path.substr(dir.size() + 1);
  EXPECT_NE(name.find("." + std::to_string(::getpid()) + ".train."), std::string::npos) << name;

  auto read = ReadEventFile(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->truncated_tail_bytes, 0u);
  ASSERT_EQ(read->events.size(), 3u);
  EXPECT_EQ(read->events[0].file_version(), kEventFileVersion);
  EXPECT_GT(read->events[0].wall_time(), 1.7e9);
  const auto& first = read->events[1];
  EXPECT_EQ(first.step(), 0);
  ASSERT_EQ(first.summary().value_size(), 2);
  EXPECT_EQ(first.summary().value(0).tag(), "train/loss");
  // A zero is written (simple_value sits in a oneof, as upstream).
  EXPECT_TRUE(first.summary().value(0).has_simple_value());
  EXPECT_EQ(first.summary().value(0).simple_value(), 0.0f);
  EXPECT_FLOAT_EQ(first.summary().value(1).simple_value(), 1e-3f);
  EXPECT_EQ(read->events[2].step(), 10);
  EXPECT_FLOAT_EQ(read->events[2].summary().value(0).simple_value(), 2.5f);
  EXPECT_GE(read->events[2].wall_time(), first.wall_time());
}

TEST(EventFileTest, TwoWritersInOneFolderGetTwoFiles) {
  TempDir tmp;
  auto a = EventFileWriter::Create(tmp.path(), "coordinator");
  auto b = EventFileWriter::Create(tmp.path(), "coordinator");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ(EventFiles(tmp.path()).size(), 2u);
}

// A writer killed in the middle of a record: every cut of the last record leaves the
// complete records readable and the cut counted, never an error.
TEST(EventFileTest, TruncatedLastRecordIsTolerated) {
  TempDir tmp;
  std::string path;
  {
    auto w = EventFileWriter::Create(tmp.path(), "train");
    ASSERT_TRUE(w.ok());
    path = (*w)->path();
    for (int step = 0; step < 3; ++step)
      ASSERT_TRUE((*w)->WriteScalars(step, {{"train/loss", 1.0f + step}}).ok());
  }
  auto whole = ReadFileToString(path);
  ASSERT_TRUE(whole.ok());
  auto full = ReadEventFile(path);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->events.size(), 4u);
  tensorboard::Event last = full->events.back();
  const size_t last_size = FrameEventRecord(last.SerializeAsString()).size();
  for (size_t cut = 1; cut < last_size; ++cut) {
    ASSERT_TRUE(WriteFileAtomically(path, whole->substr(0, whole->size() - cut)).ok());
    auto read = ReadEventFile(path);
    ASSERT_TRUE(read.ok()) << "cut " << cut << ": " << read.status().ToString();
    EXPECT_EQ(read->events.size(), 3u) << "cut " << cut;
    EXPECT_EQ(read->truncated_tail_bytes, last_size - cut);
    EXPECT_EQ(read->events.back().step(), 1);
  }
}

TEST(EventFileTest, DamagedRecordIsDataLossNamingTheOffset) {
  TempDir tmp;
  std::string path;
  {
    auto w = EventFileWriter::Create(tmp.path(), "train");
    ASSERT_TRUE(w.ok());
    path = (*w)->path();
    ASSERT_TRUE((*w)->WriteScalars(5, {{"train/loss", 3.0f}}).ok());
  }
  auto whole = ReadFileToString(path);
  ASSERT_TRUE(whole.ok());
  std::string bad = *whole;
  bad[bad.size() - 6] ^= 0x40;  // a byte of the last record's data
  ASSERT_TRUE(WriteFileAtomically(path, bad).ok());
  auto read = ReadEventFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("CRC-32C does not match"), std::string::npos)
      << read.status().message();
  EXPECT_EQ(ReadEventFile(tmp.Sub("missing")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlcd
