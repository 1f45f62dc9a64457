// The worker's image-folder / WebDataset datasets (worker/train/indexed_dataset.h) on real
// PNG/JPEG/WebP files made at test time: the same input tensors as the built-in Fashion-MNIST
// reader, bit for bit; augmentation independent of the decode threads; bad images skipped,
// counted and replaced, and too many of them failing with their keys; changed shards refused;
// the annotations of generated datasets (label sets, attributes) handed out by the dataset.
#include <gtest/gtest.h>
#include <sys/time.h>

#include <filesystem>

#include "common/dataset/dataset_index.h"
#include "common/dataset/make/make_dataset.h"
#include "common/file_util.h"
#include "common/spec_defaults.h"
#include "tests/dataset/image_data.h"
#include "tests/testing/process.h"
#include "tests/worker_data/image_testing.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {
namespace {

using mlcd::testing::TempDir;

constexpr int kImages = 64;

// Fashion-MNIST's first kImages training images as PNG (lossless, grey, 28 x 28), in four
// WebDataset shards and a flat image folder, plus the four bad samples of --bad in another
// copy; indexes of each.
class IndexedDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    mlcd::testing::ImageDataOptions o;
    o.count = kImages;
    ASSERT_TRUE(mlcd::testing::MakeImageDatasets(dir_->Sub("good"), o).ok());
    o.bad = true;
    o.format = "mixed";
    ASSERT_TRUE(mlcd::testing::MakeImageDatasets(dir_->Sub("bad"), o).ok());
    for (const char* which : {"good", "bad"}) {
      auto wds = BuildDatasetIndex(DatasetFormat::kWebDataset, {Sub(which, "shards")});
      ASSERT_TRUE(wds.ok()) << wds.status().ToString();
      ASSERT_TRUE(WriteDatasetIndex(*wds, Sub(which, "wds.idx")).ok());
      auto flat = BuildDatasetIndex(DatasetFormat::kImageFolder, {Sub(which, "flat")});
      ASSERT_TRUE(flat.ok()) << flat.status().ToString();
      ASSERT_TRUE(WriteDatasetIndex(*flat, Sub(which, "flat.idx")).ok());
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Sub(const std::string& which, const std::string& name) {
    return dir_->Sub(which + "/" + name);
  }

  // A spec whose dataset is `format` (fashion-mnist or an index), 28 x 28 grey, Fashion-MNIST's
  // normalisation, the identity evaluation transform (resize_size 28).
  static v1::JobSpec Spec(const std::string& format, const std::string& index) {
    v1::JobSpec spec;
    auto* d = spec.mutable_dataset();
    d->set_format(format);
    if (format == "fashion-mnist") d->set_limit(kImages);
    d->set_index(index);
    d->set_resize_size(28);
    d->add_mean(0.2860);
    d->add_stddev(0.3530);
    spec.mutable_model()->set_image_size(28);
    spec.mutable_model()->set_channels(1);
    ApplyJobSpecDefaults(&spec);
    return spec;
  }

  static BatchLoaderOptions Loader(const ImageDataset* ds, bool augment, int64_t batch) {
    BatchLoaderOptions o;
    o.dataset = ds;
    o.schedule.seed = 11;
    o.schedule.num_samples = ds->size();
    o.schedule.global_batch_size = batch;
    o.augment.enabled = augment;
    o.augment.seed = 11;
    o.image_size = 28;
    return o;
  }

  static TempDir* dir_;
};
TempDir* IndexedDataTest::dir_ = nullptr;

TEST_F(IndexedDataTest, PngCopiesFeedTheModelTheSameTensorsAsTheFashionMnistReader) {
  const v1::JobSpec mnist_spec = Spec("fashion-mnist", "");
  auto mnist = OpenImageDataset(mnist_spec.dataset(), "train", 0, &mnist_spec.model());
  ASSERT_TRUE(mnist.ok()) << mnist.status().ToString();
  for (const auto& [format, index] : std::vector<std::pair<std::string, std::string>>{
           {"webdataset", Sub("good", "wds.idx")}, {"image-folder", Sub("good", "flat.idx")}}) {
    SCOPED_TRACE(format);
    const v1::JobSpec spec = Spec(format, index);
    auto copy = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
    ASSERT_TRUE(copy.ok()) << copy.status().ToString();
    ASSERT_EQ((*copy)->size(), kImages);
    if (format == "webdataset") {
      EXPECT_EQ((*copy)->class_labels(), (*mnist)->class_labels());
    }
    BatchLoader a(Loader(mnist->get(), false, 16)), b(Loader(copy->get(), false, 16));
    for (int step = 0; step < 4; ++step) {
      auto x = a.Next();
      auto y = b.Next();
      ASSERT_TRUE(x.ok() && y.ok()) << x.status().ToString() << y.status().ToString();
      EXPECT_EQ(x->ids, y->ids);
      ASSERT_EQ(x->images.sizes(), y->images.sizes());
      EXPECT_TRUE(torch::equal(x->images, y->images))
          << "step " << step << ": max abs difference "
          << (x->images - y->images).abs().max().item<float>();
      EXPECT_EQ(y->bad_samples, 0);
    }
  }
}

TEST_F(IndexedDataTest, AugmentationDependsOnTheSampleNotOnThreadsOrBatches) {
  v1::JobSpec spec = Spec("webdataset", Sub("good", "wds.idx"));
  spec.mutable_model()->set_image_size(24);
  spec.mutable_dataset()->set_resize_size(0);
  spec.mutable_dataset()->set_loader_threads(1);
  auto one = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  spec.mutable_dataset()->set_loader_threads(3);
  auto three = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  ASSERT_TRUE(one.ok() && three.ok());
  AugmentOptions aug;
  aug.seed = 4;
  auto p = (*one)->Prepare({5, 9, 2, 40}, aug, 0, 1, 24);
  auto q = (*three)->Prepare({40, 2}, aug, 0, 1, 24);
  ASSERT_TRUE(p.ok() && q.ok()) << p.status().ToString() << q.status().ToString();
  EXPECT_EQ(p->images.sizes(), (std::vector<int64_t>{4, 1, 24, 24}));
  EXPECT_TRUE(torch::equal(p->images[3], q->images[0]));
  EXPECT_TRUE(torch::equal(p->images[2], q->images[1]));
  // Another epoch draws other crops.
  auto r = (*one)->Prepare({5}, aug, 0, 2, 24);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(torch::equal(p->images[0], r->images[0]));
}

TEST_F(IndexedDataTest, BadImagesAreSkippedCountedAndReplacedWithinTheirBatch) {
  v1::JobSpec spec = Spec("webdataset", Sub("bad", "wds.idx"));
  spec.mutable_dataset()->set_max_bad_fraction(0.1);
  auto ds = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), kImages + 4);
  EXPECT_EQ((*ds)->key(kImages + 2), "zzbad-2");
  // The four bad samples (ids 64..67) in one batch with good ones.
  AugmentOptions no_aug;
  no_aug.enabled = false;
  auto p = (*ds)->Prepare({kImages, 3, kImages + 1, kImages + 2, kImages + 3, 7}, no_aug, 0, 0, 28);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->bad.size(), 4u);
  EXPECT_EQ(p->bad[0].key, "zzbad-0");
  EXPECT_EQ(p->bad[0].status.code(), StatusCode::kDataLoss) << p->bad[0].status.ToString();
  EXPECT_EQ(p->bad[2].status.code(), StatusCode::kDataLoss);         // zero bytes
  EXPECT_EQ(p->bad[3].status.code(), StatusCode::kInvalidArgument);  // a GIF
  EXPECT_NE(p->bad[3].status.message().find("GIF"), std::string::npos)
      << p->bad[3].status.message();
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 1}, {2, 5}, {3, 5}, {4, 5}};
  EXPECT_EQ(p->replaced, want);
  for (const auto& [slot, source] : p->replaced)
    EXPECT_TRUE(torch::equal(p->images[slot], p->images[source]));
  std::vector<int32_t> labels = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
  ApplyReplacements(p->replaced, 2, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{1, 1, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5}));
  // A batch of bad samples only.
  auto all_bad = (*ds)->Prepare({kImages, kImages + 1}, no_aug, 0, 0, 28);
  EXPECT_EQ(all_bad.status().code(), StatusCode::kDataLoss);
  // A whole epoch through the loader: every batch full, 4 bad samples counted.
  BatchLoader loader(Loader(ds->get(), true, 17));
  int64_t bad = 0;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    auto batch = loader.Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    EXPECT_EQ(batch->images.size(0), 17);
    bad += batch->bad_samples;
  }
  EXPECT_EQ(bad, 4);
}

TEST_F(IndexedDataTest, TooManyBadImagesFailNamingTheFirstKeys) {
  v1::JobSpec spec = Spec("image-folder", Sub("bad", "flat.idx"));
  spec.mutable_dataset()->set_max_bad_fraction(0.03);  // 2 of 68 allowed
  auto ds = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  BatchLoader loader(Loader(ds->get(), false, 34));
  Status failed;
  for (int64_t i = 0; i < loader.num_batches() && failed.ok(); ++i) failed = loader.Next().status();
  EXPECT_EQ(failed.code(), StatusCode::kFailedPrecondition) << failed.ToString();
  EXPECT_NE(failed.message().find("3 distinct samples of 68"), std::string::npos)
      << failed.message();
  EXPECT_NE(failed.message().find("max_bad_fraction 0.03 allows (2)"), std::string::npos);
  EXPECT_NE(failed.message().find("zzbad-"), std::string::npos);
}

// Before: a ~100 KB PNG of 9990 x 9990 zeros passed the 100-megapixel cap
// and every loader thread could decode one (~100 MB each). Now the worker's loader threads share
// dataset.decode_memory_mb: an image larger than all of it is a bad sample, counted and
// replaced like a corrupt one, naming the budget; a budget that holds it decodes it.
TEST_F(IndexedDataTest, AnImageLargerThanTheDecodeMemoryBudgetIsABadSample) {
  TempDir d;
  std::filesystem::create_directories(d.Sub("flat"));
  for (const char* name : {"000000.png", "000001.png"})
    std::filesystem::copy(Sub("good", "flat") + "/" + name, d.Sub(std::string("flat/") + name));
  ASSERT_TRUE(
      WriteFileAtomically(d.Sub("flat/bomb.png"), worker::testing::EncodeZeroPng(9990, 9990, 1))
          .ok());
  auto index = BuildDatasetIndex(DatasetFormat::kImageFolder, {d.Sub("flat")});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_TRUE(WriteDatasetIndex(*index, d.Sub("idx")).ok());
  v1::JobSpec spec = Spec("image-folder", d.Sub("idx"));
  spec.mutable_dataset()->set_decode_memory_mb(64);
  auto ds = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->key(2), "bomb.png");
  AugmentOptions no_aug;
  no_aug.enabled = false;
  auto p = (*ds)->Prepare({0, 2, 1}, no_aug, 0, 0, 28);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->bad.size(), 1u);
  EXPECT_EQ(p->bad[0].key, "bomb.png");
  EXPECT_EQ(p->bad[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p->bad[0].status.message().find(
                "a 9990 x 9990 gray png needs 99.8 MB to decode, more than the worker's whole "
                "decode memory budget of 67.1 MB (dataset.decode_memory_mb, at most the worker's "
                "--max-decode-memory-mb"),
            std::string::npos)
      << p->bad[0].status.ToString();
  // 128 MiB holds it: decoded (all zeros), not bad.
  spec.mutable_dataset()->set_decode_memory_mb(128);
  auto roomy = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  ASSERT_TRUE(roomy.ok());
  auto q = (*roomy)->Prepare({2}, no_aug, 0, 0, 28);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_TRUE(q->bad.empty());
}

TEST_F(IndexedDataTest, ChangedShardsAreRefusedWhenTheWorkerOpensTheDataset) {
  TempDir d;
  std::filesystem::copy(Sub("good", "shards"), d.Sub("shards"));
  auto index = BuildDatasetIndex(DatasetFormat::kWebDataset, {d.Sub("shards")});
  ASSERT_TRUE(index.ok());
  ASSERT_TRUE(WriteDatasetIndex(*index, d.Sub("idx")).ok());
  const std::string shard = d.Sub("shards/train-00002.tar");
  struct timeval tv[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(::utimes(shard.c_str(), tv), 0);
  const v1::JobSpec spec = Spec("webdataset", d.Sub("idx"));
  auto ds = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  EXPECT_EQ(ds.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(ds.status().message().find("train-00002.tar"), std::string::npos);
  // No test split index.
  auto test =
      OpenImageDataset(Spec("webdataset", d.Sub("idx")).dataset(), "test", 0, &spec.model());
  EXPECT_EQ(test.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(IndexedDataTest, GeneratedDatasetsHandOutTheirAnnotations) {
  TempDir d;
  MakeDatasetOptions make;
  make.kind = GeneratedKind::kFashionMosaic;
  make.out = d.Sub("mosaics");
  make.train = 12;
  make.test = 6;
  make.samples_per_shard = 5;
  ASSERT_TRUE(MakeDataset(make).ok());
  v1::JobSpec spec = Spec("webdataset", d.Sub("mosaics/train-index"));
  spec.mutable_dataset()->set_test_index(d.Sub("mosaics/test-index"));
  spec.mutable_dataset()->set_limit(8);
  spec.mutable_dataset()->set_resize_size(56);
  spec.mutable_model()->set_image_size(56);
  auto train = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  auto index = LoadDatasetIndex(d.Sub("mosaics/train-index"));
  ASSERT_TRUE(index.ok());
  // dataset.limit keeps the first 8 samples, and their label sets.
  const DatasetAnnotations& a = (*train)->annotations();
  ASSERT_EQ(a.labels.num_labels, 10);
  ASSERT_EQ(a.labels.num_samples(), 8);
  EXPECT_TRUE(a.Check(8).ok());
  const LabelSets& all = index->annotations.labels;
  EXPECT_EQ(a.labels.ids, std::vector<int32_t>(all.ids.begin(), all.ids.begin() + all.offsets[8]));
  EXPECT_EQ(a.labels.names, all.names);
  auto batch = (*train)->Prepare({0, 7}, AugmentOptions{}, 0, 0, 56);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->images.sizes(), (std::vector<int64_t>{2, 1, 56, 56}));
  auto test = OpenImageDataset(spec.dataset(), "test", 0, &spec.model());
  ASSERT_TRUE(test.ok());
  EXPECT_EQ((*test)->annotations().labels.num_samples(), 6);

  make.kind = GeneratedKind::kTrifeature;
  make.out = d.Sub("trifeature");
  ASSERT_TRUE(MakeDataset(make).ok());
  spec = Spec("webdataset", d.Sub("trifeature/train-index"));
  spec.mutable_model()->set_channels(3);
  spec.mutable_dataset()->clear_mean();  // CLIP's, one per channel
  spec.mutable_dataset()->clear_stddev();
  auto tri = OpenImageDataset(spec.dataset(), "train", 0, &spec.model());
  ASSERT_TRUE(tri.ok()) << tri.status().ToString();
  const DatasetAnnotations& t = (*tri)->annotations();
  EXPECT_TRUE(t.labels.empty());
  ASSERT_NE(t.FindAttribute("texture"), nullptr);
  EXPECT_EQ(t.FindAttribute("texture")->values.size(), 12u);
  EXPECT_EQ((*tri)->class_labels(), t.FindAttribute("shape")->values);  // .cls is the shape

  // Datasets without annotations hand out empty ones.
  const v1::JobSpec plain = Spec("webdataset", Sub("good", "wds.idx"));
  auto good = OpenImageDataset(plain.dataset(), "train", 0, &plain.model());
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE((*good)->annotations().empty());
  const v1::JobSpec mnist = Spec("fashion-mnist", "");
  auto fm = OpenImageDataset(mnist.dataset(), "train", 0, &mnist.model());
  ASSERT_TRUE(fm.ok());
  EXPECT_TRUE((*fm)->annotations().empty());
}

}  // namespace
}  // namespace mlcd::worker
