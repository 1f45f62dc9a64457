// Sample order (the contract every rank, resume and world size relies on), augmentation
// properties, the Fashion-MNIST dataset and the background batch loader.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "common/idx.h"
#include "worker/train/dataset.h"
#include "worker/train/sample_order.h"

namespace mlcd::worker {
namespace {

TEST(SampleOrderTest, EpochPermutationIsADeterministicPermutation) {
  auto p = EpochPermutation(7, 0, 0, 1000);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(p, EpochPermutation(7, 0, 0, 1000));
  EXPECT_NE(p, EpochPermutation(7, 0, 1, 1000));
  EXPECT_NE(p, EpochPermutation(7, 1, 0, 1000));
  EXPECT_NE(p, EpochPermutation(8, 0, 0, 1000));
  // Roughly uniform: the first position takes many different values across seeds.
  std::set<int64_t> firsts;
  for (uint64_t seed = 0; seed < 200; ++seed) firsts.insert(EpochPermutation(seed, 0, 0, 10)[0]);
  EXPECT_EQ(firsts.size(), 10u);
}

TEST(SampleOrderTest, StepsPerEpochDropsTheLastBatchAndCaps) {
  EXPECT_EQ(StepsPerEpoch(1000, 64, 0), 15);
  EXPECT_EQ(StepsPerEpoch(1000, 64, 4), 4);
  EXPECT_EQ(StepsPerEpoch(60000, 256, 0), 234);
}

std::vector<int64_t> GlobalBatch(ScheduleOptions o, int64_t index) {
  std::vector<int64_t> all;
  for (int r = 0; r < o.world_size; ++r) {
    o.rank = r;
    BatchSchedule s(o);
    std::vector<int64_t> ids;
    s.LocalIds(index, &ids);
    EXPECT_EQ(static_cast<int64_t>(ids.size()), o.global_batch_size / o.world_size);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  return all;
}

TEST(SampleOrderTest, RanksSplitTheGlobalBatchContiguouslyAtAnyWorldSize) {
  ScheduleOptions o;
  o.seed = 3;
  o.num_samples = 500;
  o.global_batch_size = 48;
  o.first_epoch = 0;
  o.end_epoch = 2;
  ASSERT_TRUE(ValidateSchedule(o).ok());
  BatchSchedule one(o);
  EXPECT_EQ(one.num_batches(), 2 * 10);
  for (int64_t index : {0, 7, 10, 19}) {
    std::vector<int64_t> w1;
    one.LocalIds(index, &w1);
    StepPosition pos = one.Position(index);
    auto perm = EpochPermutation(3, 0, pos.epoch, 500);
    std::vector<int64_t> expected(perm.begin() + pos.step_in_epoch * 48,
                                  perm.begin() + (pos.step_in_epoch + 1) * 48);
    EXPECT_EQ(w1, expected);
    for (int w : {2, 3, 4, 6}) {
      ScheduleOptions ow = o;
      ow.world_size = w;
      EXPECT_EQ(GlobalBatch(ow, index), w1) << "world size " << w;
    }
  }
  // A resumed schedule (epoch 1, step 3) continues with the same batches.
  ScheduleOptions resumed = o;
  resumed.first_epoch = 1;
  resumed.first_step = 3;
  BatchSchedule r(resumed);
  EXPECT_EQ(r.num_batches(), 7);
  std::vector<int64_t> a, b;
  r.LocalIds(0, &a);
  one.LocalIds(13, &b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(r.Position(0).epoch, 1);
  EXPECT_EQ(r.Position(0).step_in_epoch, 3);
}

TEST(SampleOrderTest, ValidationNamesTheProblem) {
  ScheduleOptions o;
  o.num_samples = 100;
  o.global_batch_size = 30;
  o.world_size = 4;
  Status st = ValidateSchedule(o);
  EXPECT_NE(st.message().find("divisible by the world size"), std::string::npos) << st.ToString();
  o.world_size = 3;
  o.num_samples = 20;
  st = ValidateSchedule(o);
  EXPECT_NE(st.message().find("fewer than one global batch"), std::string::npos) << st.ToString();
  o.num_samples = 100;
  o.rank = 3;
  EXPECT_FALSE(ValidateSchedule(o).ok());
}

torch::Tensor CountingImages(int64_t n, int h, int w) {
  // Pixel value encodes (image, row, col) so positions can be checked after augmentation.
  torch::Tensor t = torch::empty({n, 1, h, w}, torch::kUInt8);
  auto a = t.accessor<uint8_t, 4>();
  for (int64_t i = 0; i < n; ++i)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        a[i][0][y][x] = static_cast<uint8_t>(1 + (y * w + x + 7 * i) % 250);
  return t;
}

TEST(AugmentTest, DisabledIsPlainNormalisation) {
  torch::Tensor px = CountingImages(3, 6, 6);
  AugmentOptions aug;
  aug.enabled = false;
  torch::Tensor out = PrepareImages(px, {0, 1, 2}, aug, 0, 0, {0.5f}, {0.25f}, 6);
  torch::Tensor expected = (px.to(torch::kFloat) / 255.0 - 0.5) / 0.25;
  EXPECT_LT((out - expected).abs().max().item<double>(), 1e-5);
}

TEST(AugmentTest, CropAndFlipMovePixelsExactlyAsDrawn) {
  const int h = 10, w = 10;
  const int64_t n = 64;
  torch::Tensor px = CountingImages(n, h, w);
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 100);
  AugmentOptions aug;
  aug.seed = 5;
  aug.padding = 3;
  torch::Tensor out = PrepareImages(px, ids, aug, 1, 2, {0.0f}, {1.0f}, w);
  auto src = px.accessor<uint8_t, 4>();
  int flips = 0;
  std::set<int> offsets;
  for (int64_t i = 0; i < n; ++i) {
    AugmentDraw d = DrawAugmentation(aug, 3, 1, 2, ids[static_cast<size_t>(i)]);
    EXPECT_GE(d.offset_y, 0);
    EXPECT_LE(d.offset_y, 6);
    offsets.insert(d.offset_x);
    flips += d.flip;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const int sx = d.flip ? (w - 1 - x) : x;
        const int py = y + d.offset_y - 3, pxx = sx + d.offset_x - 3;
        const float expected =
            (py < 0 || py >= h || pxx < 0 || pxx >= w) ? 0.0f : src[i][0][py][pxx] / 255.0f;
        ASSERT_NEAR(out[i][0][y][x].item<float>(), expected, 1e-6) << i << " " << y << " " << x;
      }
    }
  }
  EXPECT_GT(flips, 16);
  EXPECT_LT(flips, 48);
  EXPECT_EQ(offsets.size(), 7u);
  // Draws depend on the id, not on the batch it is in.
  torch::Tensor alone = PrepareImages(px.slice(0, 5, 6), {ids[5]}, aug, 1, 2, {0.0f}, {1.0f}, w);
  EXPECT_TRUE(torch::equal(alone[0], out[5]));
  // ... and change with the epoch.
  torch::Tensor other = PrepareImages(px, ids, aug, 1, 3, {0.0f}, {1.0f}, w);
  EXPECT_FALSE(torch::equal(other, out));
  EXPECT_EQ(EffectivePadding(AugmentOptions{}, 28), 3);
  EXPECT_EQ(EffectivePadding(AugmentOptions{}, 10), 2);
  EXPECT_EQ(EffectivePadding(AugmentOptions{}, 224), 4);
}

// Bilinear resampling of a linear ramp is exact, so every output pixel of a random resized
// crop of the image v(y, x) = 4x + 2y can be computed from the drawn window by hand.
TEST(AugmentTest, ResizedCropSamplesExactlyTheDrawnWindow) {
  const int h = 20, w = 24, size = 16;
  const int64_t n = 48;
  torch::Tensor ramp = torch::empty({n, 1, h, w}, torch::kUInt8);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) ramp.select(2, y).select(2, x).fill_(4 * x + 2 * y);
  }
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 7);
  AugmentOptions aug;
  aug.seed = 3;
  aug.crop_min_scale = 0.4;
  torch::Tensor out = PrepareImages(ramp, ids, aug, 0, 1, {0.0f}, {1.0f / 255.0f}, size);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{n, 1, size, size}));
  int flips = 0;
  double min_area = 1, max_area = 0;
  for (int64_t i = 0; i < n; ++i) {
    ResizedCropDraw d = DrawResizedCrop(aug, h, w, 0, 1, ids[static_cast<size_t>(i)]);
    ASSERT_GE(d.y0, 0);
    ASSERT_GE(d.x0, 0);
    ASSERT_LE(d.y0 + d.height, h + 1e-9);
    ASSERT_LE(d.x0 + d.width, w + 1e-9);
    const double area = d.height * d.width / (h * w);
    EXPECT_LE(area, 1 + 1e-9);
    // Clipping a window to the image can only shrink it below the drawn fraction by the
    // aspect ratio's clipping (at most 3/4 of it).
    EXPECT_GE(area, 0.4 * 0.75 - 1e-9);
    min_area = std::min(min_area, area);
    max_area = std::max(max_area, area);
    flips += d.flip;
    for (int j = 0; j < size; ++j) {
      for (int k = 0; k < size; ++k) {
        // Centre of output pixel (j, k) in source pixel-centre coordinates, clamped to the
        // border pixels as the sampler does.
        const double kk = d.flip ? (size - 1 - k) : k;
        const double sy = std::clamp(d.y0 + (j + 0.5) * d.height / size - 0.5, 0.0, h - 1.0);
        const double sx = std::clamp(d.x0 + (kk + 0.5) * d.width / size - 0.5, 0.0, w - 1.0);
        ASSERT_NEAR(out[i][0][j][k].item<float>(), 4 * sx + 2 * sy, 1e-2)
            << i << " " << j << " " << k;
      }
    }
  }
  EXPECT_GT(flips, 8);
  EXPECT_LT(flips, 40);
  EXPECT_LT(min_area, 0.6);
  EXPECT_GT(max_area, 0.8);
  // Draws depend on the sample and the epoch, not on the batch.
  torch::Tensor alone =
      PrepareImages(ramp.slice(0, 3, 4), {ids[3]}, aug, 0, 1, {0.0f}, {1.0f / 255.0f}, size);
  EXPECT_TRUE(torch::allclose(alone[0], out[3]));
  EXPECT_FALSE(
      torch::allclose(PrepareImages(ramp, ids, aug, 0, 2, {0.0f}, {1.0f / 255.0f}, size), out));
}

TEST(AugmentTest, ResizesToTheModelImageSize) {
  torch::Tensor px = CountingImages(2, 28, 28);
  AugmentOptions aug;
  aug.enabled = false;
  EXPECT_EQ(PrepareImages(px, {0, 1}, aug, 0, 0, {0.0f}, {1.0f}, 32).sizes(),
            (std::vector<int64_t>{2, 1, 32, 32}));
}

TEST(DatasetTest, FashionMnistWithLimitAndBadIds) {
  v1::DatasetSpec spec;
  spec.set_format("fashion-mnist");
  spec.set_path(kFashionMnistDir);
  spec.set_limit(300);
  auto ds = OpenImageDataset(spec, "train");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 300);
  EXPECT_EQ((*ds)->height(), 28);
  EXPECT_EQ((*ds)->channels(), 1);
  EXPECT_EQ((*ds)->class_labels().size(), 300u);
  std::vector<uint8_t> buf(2 * 784);
  int64_t ids[2] = {0, 299};
  EXPECT_TRUE((*ds)->Gather(ids, 2, buf.data()).ok());
  int64_t bad[1] = {300};
  Status st = (*ds)->Gather(bad, 1, buf.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("300"), std::string::npos);
  spec.set_format("imagenet");
  EXPECT_EQ(OpenImageDataset(spec, "train").status().code(), StatusCode::kInvalidArgument);
  spec.set_format("fashion-mnist");
  spec.set_path("/nonexistent/dir");
  EXPECT_EQ(OpenImageDataset(spec, "train").status().code(), StatusCode::kNotFound);
}

TEST(BatchLoaderTest, YieldsTheScheduleInOrderWithPreparedImages) {
  std::vector<uint8_t> pixels(40 * 64);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 31 % 251);
  InMemoryImageDataset ds("test", 40, 1, 8, 8, pixels, {}, {0.5f}, {0.5f});
  BatchLoaderOptions o;
  o.dataset = &ds;
  o.schedule.seed = 9;
  o.schedule.num_samples = 40;
  o.schedule.global_batch_size = 8;
  o.schedule.end_epoch = 2;
  o.schedule.world_size = 2;
  o.schedule.rank = 1;
  o.augment.seed = 9;
  o.image_size = 8;
  BatchLoader loader(o);
  BatchSchedule schedule(o.schedule);
  ASSERT_EQ(loader.num_batches(), 10);
  for (int64_t i = 0; i < 10; ++i) {
    auto b = loader.Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    std::vector<int64_t> ids;
    schedule.LocalIds(i, &ids);
    EXPECT_EQ(b->ids, ids);
    EXPECT_EQ(b->position.epoch, i / 5);
    torch::Tensor raw = torch::empty({4, 1, 8, 8}, torch::kUInt8);
    ASSERT_TRUE(ds.Gather(ids.data(), 4, raw.data_ptr<uint8_t>()).ok());
    torch::Tensor expected =
        PrepareImages(raw, ids, o.augment, 0, b->position.epoch, {0.5f}, {0.5f}, 8);
    EXPECT_TRUE(torch::equal(b->images, expected));
  }
  EXPECT_EQ(loader.Next().status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace mlcd::worker
