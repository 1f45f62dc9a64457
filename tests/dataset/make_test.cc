// `mlcdctl dataset make` (common/dataset/make/): each kind made at a tiny size from the real
// Fashion-MNIST files, read back through the dataset index and the sample reader, decoded,
// and compared with what the generator's own draws say; the same bytes for a seed; the
// layout checked by Python's tarfile (tests/dataset/check_webdataset_layout.py); the
// mosaics' label file imported as `mlcdctl labels import` reads it; the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "client/label_import.h"
#include "common/dataset/dataset_index.h"
#include "common/dataset/make/fashion_items.h"
#include "common/dataset/make/make_dataset.h"
#include "common/dataset/make/palette.h"
#include "common/dataset/make/trifeature.h"
#include "common/dataset/sample_reader.h"
#include "tests/testing/process.h"
#include "worker/data/image_decode.h"

namespace mlcd {
namespace {

using testing::TempDir;
using worker::DecodeImage;
using worker::DecodeOptions;
using worker::Image;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

StatusOr<MadeDataset> Make(GeneratedKind kind, const std::string& out, uint64_t seed,
                           int64_t train = 20, int64_t test = 10, int image_size = 0) {
  MakeDatasetOptions o;
  o.kind = kind;
  o.out = out;
  o.seed = seed;
  o.train = train;
  o.test = test;
  o.samples_per_shard = 8;
  o.image_size = image_size;
  return MakeDataset(o);
}

// Sample `id`'s image, read by offset through `index` and decoded to `channels`.
Image ReadImage(const DatasetIndex& index, int64_t id, int channels) {
  SampleReader reader(&index);
  std::string bytes;
  Status read = reader.Read(id, &bytes);
  EXPECT_TRUE(read.ok()) << read.ToString();
  DecodeOptions options;
  options.channels = channels;
  StatusOr<Image> image = DecodeImage(bytes, options);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? *image : Image{};
}

DatasetIndex LoadIndex(const std::string& dir) {
  StatusOr<DatasetIndex> index = LoadDatasetIndex(dir);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return index.ok() ? *index : DatasetIndex{};
}

void ExpectLayout(const std::string& dir) {
  std::string out;
  const int rc = testing::RunCommand(
      "/usr/bin/python3", {MLCD_SOURCE_DIR "/tests/dataset/check_webdataset_layout.py", dir}, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("train: 20 samples in 3 shards follow the layout"), std::string::npos) << out;
  EXPECT_NE(out.find("test: 10 samples in 2 shards"), std::string::npos) << out;
}

TEST(FashionMosaicTest, LabelsAreTheClassesOfTheDrawnTiles) {
  TempDir dir;
  StatusOr<MadeDataset> made = Make(GeneratedKind::kFashionMosaic, dir.Sub("m"), 7);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->train.shards.size(), 3u);
  EXPECT_EQ(made->image_size, 56);
  for (const std::string split : {"train", "test"}) {
    StatusOr<FashionItems> items = LoadFashionItems(kFashionMnistDir, split);
    ASSERT_TRUE(items.ok()) << items.status().ToString();
    const DatasetIndex index = LoadIndex(dir.Sub("m/" + split + "-index"));
    const LabelSets& labels = index.annotations.labels;
    ASSERT_EQ(labels.num_labels, 10);
    ASSERT_EQ(labels.num_samples(), split == "train" ? 20 : 10);
    EXPECT_EQ(labels.names[9], "ankle-boot");
    const uint64_t stream = SplitStreamSeed(GeneratedKind::kFashionMosaic, 7, split);
    for (int64_t i = 0; i < labels.num_samples(); ++i) {
      const auto tiles = DrawMosaic(stream, i, items->images.count);
      // The label set is the set of the four tiles' IDX classes.
      std::set<int32_t> classes;
      for (int64_t t : tiles) classes.insert(items->classes[static_cast<size_t>(t)]);
      EXPECT_EQ(std::vector<int32_t>(labels.begin(i), labels.begin(i) + labels.count(i)),
                std::vector<int32_t>(classes.begin(), classes.end()));
      // Each quadrant holds its tile's pixels, exactly.
      const Image image = ReadImage(index, i, 1);
      ASSERT_EQ(image.height, 56);
      for (int t = 0; t < 4; ++t) {
        const uint8_t* src = items->images.pixels.data() + tiles[static_cast<size_t>(t)] * 784;
        for (int y = 0; y < 28; ++y) {
          for (int x = 0; x < 28; ++x) {
            ASSERT_EQ(image.pixels[static_cast<size_t>(((t / 2) * 28 + y) * 56 + (t % 2) * 28 + x)],
                      src[y * 28 + x])
                << split << " sample " << i << " tile " << t;
          }
        }
      }
    }
  }
  ExpectLayout(dir.Sub("m"));
}

TEST(FashionMosaicTest, SameBytesForASeedOthersForAnother) {
  TempDir dir;
  ASSERT_TRUE(Make(GeneratedKind::kFashionMosaic, dir.Sub("a"), 3).ok());
  ASSERT_TRUE(Make(GeneratedKind::kFashionMosaic, dir.Sub("b"), 3).ok());
  ASSERT_TRUE(Make(GeneratedKind::kFashionMosaic, dir.Sub("c"), 4).ok());
  // A longer split starts with the same samples.
  ASSERT_TRUE(Make(GeneratedKind::kFashionMosaic, dir.Sub("d"), 3, 24, 10).ok());
  for (const char* f : {"train/00000.tar", "train/00002.tar", "test/00001.tar",
                        "train-labels.jsonl", "train/annotations.json"}) {
    EXPECT_EQ(ReadAll(dir.Sub(std::string("a/") + f)), ReadAll(dir.Sub(std::string("b/") + f)))
        << f;
  }
  EXPECT_NE(ReadAll(dir.Sub("a/train/00000.tar")), ReadAll(dir.Sub("c/train/00000.tar")));
  EXPECT_EQ(ReadAll(dir.Sub("a/train/00001.tar")), ReadAll(dir.Sub("d/train/00001.tar")));
  EXPECT_EQ(ReadAll(dir.Sub("a/train-index/annotations.bin")),
            ReadAll(dir.Sub("b/train-index/annotations.bin")));
}

TEST(FashionMosaicTest, LabelFileImports) {
  TempDir dir;
  ASSERT_TRUE(Make(GeneratedKind::kFashionMosaic, dir.Sub("m"), 1).ok());
  cli::ImportSource source;
  source.k = 10;
  source.jsonl_path = dir.Sub("m/train-labels.jsonl");
  source.index_dir = dir.Sub("m/train-index");
  StatusOr<cli::ImportedLabels> rows = cli::ReadImportSource(source);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const LabelSets& sets = LoadIndex(dir.Sub("m/train-index")).annotations.labels;
  ASSERT_EQ(rows->ids.size(), 20u);
  EXPECT_EQ(rows->max_labels, rows->l);
  for (size_t r = 0; r < rows->ids.size(); ++r) {
    const int64_t id = static_cast<int64_t>(rows->ids[r]);
    std::set<int32_t> row(rows->labels.begin() + static_cast<int64_t>(r) * rows->l,
                          rows->labels.begin() + static_cast<int64_t>(r + 1) * rows->l);
    EXPECT_EQ(row, std::set<int32_t>(sets.begin(id), sets.begin(id) + sets.count(id))) << id;
  }
}

TEST(TrifeatureTest, AttributesAndPixelsFollowTheDraws) {
  TempDir dir;
  StatusOr<MadeDataset> made = Make(GeneratedKind::kTrifeature, dir.Sub("t"), 11, 20, 10, 40);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const DatasetIndex index = LoadIndex(dir.Sub("t/train-index"));
  const DatasetAnnotations& a = index.annotations;
  ASSERT_EQ(a.attributes.size(), 3u);
  EXPECT_EQ(a.attributes[0].name, "shape");
  EXPECT_EQ(a.attributes[1].class_names[8], "pinwheel");
  EXPECT_EQ(a.attributes[2].class_names[0], "red");
  const uint64_t stream = SplitStreamSeed(GeneratedKind::kTrifeature, 11, "train");
  for (int64_t i = 0; i < index.size(); ++i) {
    const TrifeatureDraw d = DrawTrifeature(stream, i, 40);
    EXPECT_EQ(a.attributes[0].values[i], d.shape);
    EXPECT_EQ(a.attributes[1].values[i], d.texture);
    EXPECT_EQ(a.attributes[2].values[i], d.colour);
    EXPECT_EQ(index.samples[i].class_id, d.shape);  // .cls
    const Image image = ReadImage(index, i, 3);
    EXPECT_EQ(image.pixels, RenderTrifeature(d, 40)) << i;
    // Every pixel is the background, the colour or its shade; the colour is lit somewhere.
    const uint8_t* c = kPalette[static_cast<size_t>(d.colour)].rgb;
    int lit = 0;
    for (size_t p = 0; p < image.pixels.size(); p += 3) {
      const uint8_t* px = &image.pixels[p];
      const bool on = px[0] == c[0] && px[1] == c[1] && px[2] == c[2];
      const bool shade = px[0] == c[0] * 2 / 5 && px[1] == c[1] * 2 / 5 && px[2] == c[2] * 2 / 5;
      const bool background = px[0] == 40 && px[1] == 40 && px[2] == 40;
      ASSERT_TRUE(on || shade || background) << "sample " << i << " pixel " << p / 3;
      lit += on;
    }
    EXPECT_GT(lit, 0) << i;
  }
  // The three attributes are drawn independently and uniformly: over many draws every value
  // of each appears, and shape does not decide colour.
  int counts[3][10] = {};
  int same = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const TrifeatureDraw d = DrawTrifeature(stream, i, 32);
    ++counts[0][d.shape];
    ++counts[1][d.texture];
    ++counts[2][d.colour];
    same += d.shape == d.colour;
  }
  for (const auto& attribute : counts) {
    for (int v : attribute) EXPECT_GT(v, 120);  // 200 expected; below 120 is p < 1e-8
  }
  EXPECT_LT(same, 300);  // 200 expected when independent
  ExpectLayout(dir.Sub("t"));
}

// Each shape's area, integrated over a fine grid of the unit frame, against geometry.
TEST(TrifeatureTest, ShapeAreasMatchGeometry) {
  const double kSqrt3 = 1.7320508075688772;
  const double expected[10] = {
      3 * kSqrt3 / 4,                               // triangle, circumradius 1
      1.4 * 1.4,                                    // square
      2 * 0.6 * 1.8 - 0.6 * 0.6,                    // plus
      M_PI * 0.85 * 0.85,                           // circle
      1.4 * 0.4 + 0.44 * 1.1,                       // tee
      2 * 0.95 * 0.5,                               // rhombus
      2.5 * 0.95 * 0.95 * 0.9510565162951535,       // pentagon: (5/2) r^2 sin 72
      5 * 1.0 * 0.4 * 0.5877852522924731,           // star: 10 triangles (1/2) R r sin 36
      1.0 * (0.65 + 0.4 * 0.5 + 0.65 - 0.4 * 0.5),  // trapezoid: height x mean width
      0.45 * 1.4 + 1.2 * 0.45 - 0.45 * 0.45,        // ell: two bars less their overlap
  };
  const int n = 1000;
  for (int shape = 0; shape < 10; ++shape) {
    int inside = 0;
    for (int yi = 0; yi < n; ++yi) {
      for (int xi = 0; xi < n; ++xi) {
        inside += InsideTrifeatureShape(shape, -1 + (xi + 0.5) * 2 / n, -1 + (yi + 0.5) * 2 / n);
      }
    }
    EXPECT_NEAR(inside * 4.0 / (n * n), expected[shape], 0.01) << kTrifeatureShapeNames[shape];
  }
}

TEST(FashionTintTest, ColourIsDrawnAndClassIsTheItems) {
  TempDir dir;
  StatusOr<MadeDataset> made = Make(GeneratedKind::kFashionTint, dir.Sub("f"), 5);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  StatusOr<FashionItems> items = LoadFashionItems(kFashionMnistDir, "test");
  ASSERT_TRUE(items.ok());
  const DatasetIndex index = LoadIndex(dir.Sub("f/test-index"));
  const DatasetAnnotations& a = index.annotations;
  ASSERT_EQ(a.attributes.size(), 2u);
  const uint64_t stream = SplitStreamSeed(GeneratedKind::kFashionTint, 5, "test");
  for (int64_t i = 0; i < index.size(); ++i) {
    const int colour = DrawTint(stream, i);
    EXPECT_EQ(a.attributes[0].values[i], items->classes[static_cast<size_t>(i)]);
    EXPECT_EQ(a.attributes[1].values[i], colour);
    const Image image = ReadImage(index, i, 3);
    const uint8_t* rgb = kPalette[static_cast<size_t>(colour)].rgb;
    for (int p = 0; p < 784; ++p) {
      const int g = items->images.pixels[static_cast<size_t>(i * 784 + p)];
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(image.pixels[static_cast<size_t>(p * 3 + c)], (g * rgb[c] + 127) / 255)
            << "sample " << i << " pixel " << p;
      }
    }
  }
  ExpectLayout(dir.Sub("f"));
}

TEST(MakeDatasetTest, RefusalsSayWhatToChange) {
  TempDir dir;
  MakeDatasetOptions o;
  o.out = dir.Sub("x");
  o.train = 0;
  EXPECT_NE(MakeDataset(o).status().message().find("--train 0 is outside [1, 1000000]"),
            std::string::npos);
  o.train = 10;
  o.image_size = 32;
  EXPECT_NE(MakeDataset(o).status().message().find("--image-size applies to trifeature only"),
            std::string::npos);
  o.kind = GeneratedKind::kTrifeature;
  o.image_size = 8;
  EXPECT_NE(MakeDataset(o).status().message().find("--image-size 8 is outside [24, 256]"),
            std::string::npos);
  o.kind = GeneratedKind::kFashionTint;
  o.image_size = 0;
  o.test = 10001;
  Status s = MakeDataset(o).status();
  EXPECT_NE(s.message().find("uses each test image once: --test 10001 is outside [1, 10000]"),
            std::string::npos)
      << s.message();
  o.test = 10;
  o.fashion_mnist_dir = dir.Sub("nowhere");
  s = MakeDataset(o).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("dataset-fashion-mnist"), std::string::npos) << s.message();
  EXPECT_EQ(ParseGeneratedKind("mosaic").status().code(), StatusCode::kInvalidArgument);

  std::string out;
  const std::string mlcdctl = testing::BinPath("mlcdctl");
  int rc = testing::RunCommand(mlcdctl,
                               {"dataset", "make", "trifeature", "--out", dir.Sub("t"), "--train",
                                "3", "--test", "2", "--seed", "9"},
                               &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("trifeature: 3 train and 2 test images of 32x32x3"), std::string::npos) << out;
  EXPECT_NE(out.find("attributes shape (10), texture (10), colour (10)"), std::string::npos);
  rc = testing::RunCommand(mlcdctl, {"dataset", "make", "trifeature", "--out", dir.Sub("t")}, &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("already holds 'dataset.json'"), std::string::npos) << out;
  rc = testing::RunCommand(mlcdctl, {"dataset", "make", "cifar", "--out", dir.Sub("c")}, &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("one of fashion-mosaic, trifeature, fashion-tint"), std::string::npos) << out;
  rc = testing::RunCommand(
      mlcdctl,
      {"dataset", "make", "fashion-mosaic", "--out", dir.Sub("m"), "--train", "4", "--test", "2"},
      &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("import with mlcdctl labels import --name NAME --k 10 --jsonl"),
            std::string::npos)
      << out;
  rc = testing::RunCommand(mlcdctl, {"dataset", "show", dir.Sub("m/train-index")}, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("annotations: 10 labels"), std::string::npos) << out;
  rc = testing::RunCommand(mlcdctl, {"-o", "json", "dataset", "show", dir.Sub("m/test-index")},
                           &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"annotations\": {\n    \"labels\": {\n      \"count\": 10"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace mlcd
