// The dataset index (common/dataset/) on real images: PIL-encoded Fashion-MNIST in an image
// folder and in WebDataset shards, indexed by libarchive, read back by offset, persisted,
// and refused once the files change.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/dataset/dataset_index.h"
#include "common/dataset/image_folder.h"
#include "common/dataset/sample_reader.h"
#include "common/dataset/webdataset.h"
#include "common/file_util.h"
#include "common/format.h"
#include "tests/dataset/image_data.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

namespace fs = std::filesystem;
using testing::ImageDataOptions;
using testing::MakeImageDatasets;
using testing::ReadLines;
using testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Sets a file's mtime one minute ahead (a "touch" that surely changes it).
void Touch(const std::string& path) {
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  struct timeval tv[2] = {{st.st_atim.tv_sec, 0}, {st.st_mtim.tv_sec + 60, 0}};
  ASSERT_EQ(::utimes(path.c_str(), tv), 0);
}

// One generated dataset shared by the tests of this file (40 images, png/jpeg/webp mixed,
// 4 shards, member names with a 120-character directory so tar writes pax headers).
class DatasetIndexTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ImageDataOptions o;
    o.count = 40;
    o.format = "mixed";
    o.key_prefix = std::string(120, 'd') + "/";
    Status made = MakeImageDatasets(dir_->path(), o);
    ASSERT_TRUE(made.ok()) << made.ToString();
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Path(const std::string& name) { return dir_->Sub(name); }
  static TempDir* dir_;
};
TempDir* DatasetIndexTest::dir_ = nullptr;

TEST(BracesTest, RangesListsAndErrors) {
  auto r = ExpandBraces("s/train-{00008..00011}.tar");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<std::string>{"s/train-00008.tar", "s/train-00009.tar",
                                          "s/train-00010.tar", "s/train-00011.tar"}));
  r = ExpandBraces("{a,b}-{1..2}.tar");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::string>{"a-1.tar", "a-2.tar", "b-1.tar", "b-2.tar"}));
  r = ExpandBraces("plain.tar");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::vector<std::string>{"plain.tar"});
  for (const char* bad : {"x-{3..1}.tar", "x-{1..2.tar", "x-{}.tar", "x-{a..b}.tar", "x}.tar",
                          "x-{0..99999999}.tar", "{{1..2}}"}) {
    EXPECT_EQ(ExpandBraces(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(BracesTest, MemberNames) {
  std::string key, ext;
  ASSERT_TRUE(SplitMemberName("a/b/000123.seg.png", &key, &ext));
  EXPECT_EQ(key, "a/b/000123");
  EXPECT_EQ(ext, "seg.png");
  ASSERT_TRUE(SplitMemberName("x.y/0001.jpg", &key, &ext));
  EXPECT_EQ(key, "x.y/0001");
  EXPECT_FALSE(SplitMemberName("dir/noext", &key, &ext));
  EXPECT_FALSE(SplitMemberName("dir/.hidden", &key, &ext));
}

TEST_F(DatasetIndexTest, WebDatasetOffsetsReadTheImageBytes) {
  auto wds =
      BuildDatasetIndex(DatasetFormat::kWebDataset, {Path("shards/train-{00000..00003}.tar")});
  ASSERT_TRUE(wds.ok()) << wds.status().ToString();
  auto flat = BuildDatasetIndex(DatasetFormat::kImageFolder, {Path("flat")});
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  const std::vector<std::string> keys = ReadLines(Path("keys.txt"));
  const std::vector<std::string> labels = ReadLines(Path("labels.txt"));
  ASSERT_EQ(wds->size(), 40);
  ASSERT_EQ(flat->size(), 40);
  EXPECT_EQ(wds->files.size(), 4u);
  EXPECT_TRUE(flat->classes.empty());
  SampleReader wds_reader(&*wds), flat_reader(&*flat);
  std::string a, b;
  for (int64_t i = 0; i < 40; ++i) {
    EXPECT_EQ(wds->keys[i], std::string(120, 'd') + "/" + keys[i]);
    EXPECT_EQ(wds->samples[i].class_id, std::stoi(labels[i]));
    EXPECT_EQ(flat->samples[i].class_id, -1);
    // The flat folder's sorted names are the same images in the same order.
    EXPECT_EQ(flat->keys[i].substr(0, 6), keys[i]);
    ASSERT_TRUE(wds_reader.Read(i, &a).ok());
    ASSERT_TRUE(flat_reader.Read(i, &b).ok());
    EXPECT_EQ(a, b) << "sample " << i;
    EXPECT_EQ(b, ReadAll(Path("flat/" + flat->keys[i])));
    EXPECT_GT(a.size(), 100u);
  }
  EXPECT_EQ(wds_reader.Read(40, &a).code(), StatusCode::kOutOfRange);
  // A directory of shards is the same dataset.
  auto by_dir = BuildDatasetIndex(DatasetFormat::kWebDataset, {Path("shards")});
  ASSERT_TRUE(by_dir.ok()) << by_dir.status().ToString();
  EXPECT_EQ(by_dir->keys, wds->keys);
}

TEST_F(DatasetIndexTest, ImageFolderClassesAndExtensions) {
  TempDir d;
  fs::copy(Path("folder"), d.Sub("f"), fs::copy_options::recursive);
  // Any case of the extension counts; other files are skipped.
  fs::rename(d.Sub("f/bag/" + fs::directory_iterator(d.Sub("f/bag"))->path().filename().string()),
             d.Sub("f/bag/UPPER.PNG"));
  std::ofstream(d.Sub("f/bag/notes.txt")) << "not an image";
  auto index = BuildImageFolderIndex(d.Sub("f"));
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->size(), 40);
  EXPECT_EQ(index->skipped, 1u);
  std::vector<std::string> sorted = index->classes;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(index->classes, sorted);
  ASSERT_EQ(index->classes.size(), 10u);
  EXPECT_TRUE(std::find(index->keys.begin(), index->keys.end(), "bag/UPPER.PNG") !=
              index->keys.end());
  EXPECT_TRUE(std::is_sorted(index->keys.begin(), index->keys.end()));
  for (int64_t i = 0; i < index->size(); ++i) {
    const std::string cls = index->keys[i].substr(0, index->keys[i].find('/'));
    EXPECT_EQ(index->classes[index->samples[i].class_id], cls);
  }
  // An image directly in a root that has class folders is refused.
  fs::copy_file(Path("flat/000000.png"), d.Sub("f/stray.png"));
  auto mixed = BuildImageFolderIndex(d.Sub("f"));
  EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("stray.png"), std::string::npos);
  EXPECT_EQ(BuildImageFolderIndex(d.Sub("missing")).status().code(), StatusCode::kNotFound);
  fs::create_directory(d.Sub("empty"));
  EXPECT_EQ(BuildImageFolderIndex(d.Sub("empty")).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DatasetIndexTest, PersistedIndexRoundTripsAndRefusesChangedFiles) {
  TempDir d;
  fs::copy(Path("shards"), d.Sub("shards"));
  auto built = BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("shards/train-{0..3}.tar")});
  EXPECT_EQ(built.status().code(), StatusCode::kNotFound);  // "train-0.tar": no padding
  built = BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("shards/train-{00000..00003}.tar")});
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ASSERT_TRUE(WriteDatasetIndex(*built, d.Sub("idx")).ok());
  auto loaded = LoadDatasetIndex(d.Sub("idx"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->keys, built->keys);
  EXPECT_EQ(loaded->classes, built->classes);
  EXPECT_EQ(loaded->format, DatasetFormat::kWebDataset);
  ASSERT_EQ(loaded->samples.size(), built->samples.size());
  for (size_t i = 0; i < built->samples.size(); ++i) {
    EXPECT_EQ(loaded->samples[i].offset, built->samples[i].offset);
    EXPECT_EQ(loaded->samples[i].size, built->samples[i].size);
    EXPECT_EQ(loaded->samples[i].file, built->samples[i].file);
    EXPECT_EQ(loaded->samples[i].class_id, built->samples[i].class_id);
  }
  // Touched shard: refused, naming it.
  Touch(d.Sub("shards/train-00002.tar"));
  auto touched = LoadDatasetIndex(d.Sub("idx"));
  EXPECT_EQ(touched.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(touched.status().message().find("train-00002.tar"), std::string::npos);
  EXPECT_NE(touched.status().message().find("rebuild"), std::string::npos);
  EXPECT_TRUE(LoadDatasetIndex(d.Sub("idx"), /*check_fingerprint=*/false).ok());
  // Grown shard and missing shard.
  ASSERT_TRUE(WriteDatasetIndex(*BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("shards")}),
                                d.Sub("idx"))
                  .ok());
  std::ofstream(d.Sub("shards/train-00001.tar"), std::ios::app) << "more";
  auto grown = LoadDatasetIndex(d.Sub("idx"));
  EXPECT_EQ(grown.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(grown.status().message().find("bytes, was"), std::string::npos);
  ASSERT_TRUE(WriteDatasetIndex(*BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("shards")}),
                                d.Sub("idx"))
                  .ok());
  fs::remove(d.Sub("shards/train-00003.tar"));
  auto missing = LoadDatasetIndex(d.Sub("idx"));
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("train-00003.tar"), std::string::npos);
  EXPECT_EQ(LoadDatasetIndex(d.Sub("nothing")).status().code(), StatusCode::kNotFound);
}

TEST_F(DatasetIndexTest, BadShardsAreRefusedWithTheirNames) {
  TempDir d;
  fs::copy(Path("shards"), d.Sub("shards"));
  // A shard missing from a range.
  auto missing =
      BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("shards/train-{00000..00004}.tar")});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("train-00004.tar"), std::string::npos);
  // The same keys twice.
  fs::copy_file(d.Sub("shards/train-00000.tar"), d.Sub("copy.tar"));
  auto dup = BuildDatasetIndex(DatasetFormat::kWebDataset,
                               {d.Sub("shards/train-00000.tar"), d.Sub("copy.tar")});
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("occurs twice"), std::string::npos);
  // A compressed shard.
  std::string out;
  ASSERT_EQ(testing::RunCommand("/bin/gzip", {"-k", d.Sub("copy.tar")}, &out), 0) << out;
  auto gz = BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("copy.tar.gz")});
  EXPECT_EQ(gz.status().code(), StatusCode::kFailedPrecondition) << gz.status().ToString();
  EXPECT_NE(gz.status().message().find("compressed"), std::string::npos);
  // A shard cut in the middle of a member.
  const std::string shard = d.Sub("shards/train-00001.tar");
  ASSERT_EQ(::truncate(shard.c_str(), 1500), 0);
  auto cut = BuildDatasetIndex(DatasetFormat::kWebDataset, {shard});
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss) << cut.status().ToString();
  EXPECT_NE(cut.status().message().find("train-00001.tar"), std::string::npos);
  // Not a tar at all.
  std::ofstream(d.Sub("junk.tar")) << std::string(3000, 'x');
  auto junk = BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("junk.tar")});
  EXPECT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk.tar"), std::string::npos);
}

TEST_F(DatasetIndexTest, OnlyWholeImageExtensionsAreImages) {
  // A sample whose only "image" is key.seg.png (a segmentation field) has no image; one with
  // an upper-case .JPG has one.
  TempDir d;
  std::string out;
  const std::string script =
      "import io, tarfile, sys\n"
      "t = tarfile.open(sys.argv[1], 'w')\n"
      "for name, data in [('a.seg.png', b'x'), ('a.txt', b'cap'), ('b.JPG', open(sys.argv[2], "
      "'rb').read()), ('b.cls', b'3')]:\n"
      "    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))\n"
      "t.close()\n";
  ASSERT_EQ(testing::RunCommand("/usr/bin/python3",
                                {"-c", script, d.Sub("s.tar"), Path("flat/000001.jpg")}, &out),
            0)
      << out;
  auto index = BuildWebDatasetIndex({d.Sub("s.tar")});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_EQ(index->size(), 1);
  EXPECT_EQ(index->keys[0], "b");
  EXPECT_EQ(index->samples[0].class_id, 3);
  EXPECT_EQ(index->skipped, 1u);
}

// ESC, BEL and backspace in a member's name passed the key check and reached
// terminals and logs through the messages naming the key. Such a key is refused, the member
// named with its control characters escaped; the same for a file of an image folder.
TEST_F(DatasetIndexTest, KeysWithControlCharactersAreRefusedNamedEscaped) {
  TempDir d;
  std::string out;
  const std::string script =
      "import io, tarfile, sys\n"
      "t = tarfile.open(sys.argv[1], 'w')\n"
      "img = open(sys.argv[2], 'rb').read()\n"
      "for name in ['ok.jpg', 'x\\x1b]0;pwned\\x07\\x1b[2J\\x08.jpg']:\n"
      "    i = tarfile.TarInfo(name); i.size = len(img); t.addfile(i, io.BytesIO(img))\n"
      "t.close()\n";
  ASSERT_EQ(testing::RunCommand("/usr/bin/python3",
                                {"-c", script, d.Sub("s.tar"), Path("flat/000001.jpg")}, &out),
            0)
      << out;
  auto index = BuildWebDatasetIndex({d.Sub("s.tar")});
  ASSERT_EQ(index.status().code(), StatusCode::kInvalidArgument) << index.status().ToString();
  const std::string& message = index.status().message();
  EXPECT_NE(message.find("member 'x\\x1b]0;pwned\\x07\\x1b[2J\\x08.jpg'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("control character"), std::string::npos) << message;
  EXPECT_FALSE(HasControlChars(message)) << message;

  fs::create_directories(d.Sub("folder"));
  fs::copy_file(Path("flat/000001.jpg"), d.Sub("folder/a.jpg"));
  fs::copy_file(Path("flat/000001.jpg"), d.Sub("folder/b\x1b[2J\x07.jpg"));
  auto folder = BuildImageFolderIndex(d.Sub("folder"));
  ASSERT_EQ(folder.status().code(), StatusCode::kInvalidArgument) << folder.status().ToString();
  EXPECT_NE(folder.status().message().find("'b\\x1b[2J\\x07.jpg'"), std::string::npos)
      << folder.status().message();
  EXPECT_FALSE(HasControlChars(folder.status().message()));
}

TEST_F(DatasetIndexTest, ReaderReportsAFileShorterThanIndexed) {
  TempDir d;
  fs::copy(Path("flat"), d.Sub("flat"));
  auto index = BuildImageFolderIndex(d.Sub("flat"));
  ASSERT_TRUE(index.ok());
  ASSERT_EQ(::truncate(index->files[3].path.c_str(), 10), 0);
  SampleReader reader(&*index);
  std::string bytes;
  Status st = reader.Read(3, &bytes);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(index->keys[3]), std::string::npos);
}

TEST_F(DatasetIndexTest, MlcdctlBuildsAndChecksIndexes) {
  TempDir d;
  fs::copy(Path("shards"), d.Sub("shards"));
  std::string out;
  int rc = testing::RunCommand(testing::BinPath("mlcdctl"),
                               {"dataset", "index", "--format", "webdataset", "--path",
                                d.Sub("shards/train-{00000..00003}.tar"), "--out", d.Sub("idx")},
                               &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("40 samples in 4 files, 10 classes"), std::string::npos) << out;
  rc = testing::RunCommand(testing::BinPath("mlcdctl"), {"dataset", "show", d.Sub("idx")}, &out);
  EXPECT_EQ(rc, 0) << out;
  Touch(d.Sub("shards/train-00000.tar"));
  rc = testing::RunCommand(testing::BinPath("mlcdctl"), {"dataset", "show", d.Sub("idx")}, &out);
  EXPECT_EQ(rc, 5) << out;  // FAILED_PRECONDITION
  EXPECT_NE(out.find("train-00000.tar"), std::string::npos) << out;
  rc = testing::RunCommand(
      testing::BinPath("mlcdctl"),
      {"dataset", "index", "--format", "tiff", "--path", d.Sub("shards"), "--out", d.Sub("x")},
      &out);
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace mlcd
