// Two-view batches and SimCLR's colour augmentations (worker/train/dataset.h,
// worker/train/colour_augment.h): the interleaved view layout, per-view draws that are
// deterministic and independent of the batch, the switches (flip, jitter, grayscale off =
// untouched), and the colour operations against their formulas computed by hand in float64.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "worker/train/colour_augment.h"
#include "worker/train/dataset.h"
#include "worker/train/image_bytes.h"

namespace mlcd::worker {
namespace {

// 24 colour images of 6x6 with varied pixels.
InMemoryImageDataset ColourDataset() {
  std::vector<uint8_t> pixels(24 * 3 * 36);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 % 253);
  return InMemoryImageDataset("colour", 24, 3, 6, 6, pixels, {}, {0.5f, 0.4f, 0.3f},
                              {0.25f, 0.2f, 0.3f});
}

BatchLoaderOptions Loader(const ImageDataset* ds, int views) {
  BatchLoaderOptions o;
  o.dataset = ds;
  o.schedule.seed = 5;
  o.schedule.num_samples = ds->size();
  o.schedule.global_batch_size = 8;
  o.schedule.end_epoch = 1;
  o.augment.seed = 5;
  o.augment.crop_min_scale = 0.3;
  o.augment.color_jitter_prob = 0.8;
  o.augment.jitter_brightness = 0.8;
  o.augment.jitter_contrast = 0.8;
  o.augment.jitter_saturation = 0.8;
  o.augment.jitter_hue = 0.2;
  o.augment.grayscale_prob = 0.2;
  o.image_size = 6;
  o.views = views;
  return o;
}

std::vector<torch::Tensor> AllBatches(const BatchLoaderOptions& o) {
  BatchLoader loader(o);
  std::vector<torch::Tensor> out;
  for (auto b = loader.Next(); b.ok(); b = loader.Next()) out.push_back(b->images);
  return out;
}

// Rows 2k and 2k+1 are image k's views 0 and 1; view 0 is exactly the one-view batch; the two
// views differ; a second loader gives the same bits (the draws are (seed, round, epoch, id,
// view)); each view equals the image prepared alone (independent of the batch).
TEST(TwoViewTest, InterleavedDeterministicAndViewZeroIsTheOneViewBatch) {
  InMemoryImageDataset ds = ColourDataset();
  const auto one = AllBatches(Loader(&ds, 1));
  const auto two = AllBatches(Loader(&ds, 2));
  const auto again = AllBatches(Loader(&ds, 2));
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(two.size(), 3u);
  BatchSchedule schedule(Loader(&ds, 2).schedule);
  for (size_t b = 0; b < two.size(); ++b) {
    ASSERT_EQ(two[b].sizes().vec(), (std::vector<int64_t>{16, 3, 6, 6}));
    EXPECT_TRUE(torch::equal(two[b], again[b]));
    const torch::Tensor views = two[b].view({8, 2, 3, 6, 6});
    EXPECT_TRUE(torch::equal(views.select(1, 0), one[b]));
    EXPECT_FALSE(torch::equal(views.select(1, 0), views.select(1, 1)));
    std::vector<int64_t> ids;
    schedule.LocalIds(static_cast<int64_t>(b), &ids);
    for (int view = 0; view < 2; ++view) {
      AugmentOptions a = Loader(&ds, 2).augment;
      a.view = view;
      auto alone = ds.Prepare({ids[3]}, a, 0, 0, 6);
      ASSERT_TRUE(alone.ok());
      ApplyColourAugmentation(alone->images, {ids[3]}, a, 0, 0, ds.mean(), ds.stddev());
      EXPECT_TRUE(torch::allclose(views[3][view], alone->images[0], 0, 1e-6)) << view;
    }
  }
}

TEST(TwoViewTest, ViewZeroDrawsWhatAOneViewRunDraws) {
  AugmentOptions a;
  a.seed = 3;
  a.crop_min_scale = 0.2;
  AugmentOptions v1 = a;
  v1.view = 1;
  int differ = 0;
  for (int64_t id = 0; id < 50; ++id) {
    const ResizedCropDraw d0 = DrawResizedCrop(a, 28, 28, 0, 1, id);
    const ResizedCropDraw d1 = DrawResizedCrop(v1, 28, 28, 0, 1, id);
    differ += d0.y0 != d1.y0 || d0.x0 != d1.x0;
    EXPECT_EQ(AugmentHash(a, 7, 0, 1, id), AugmentHash(a, 7, 0, 1, id));
  }
  EXPECT_GT(differ, 45);
}

// Off = untouched: no jitter and no grayscale leave the prepared images' bits as they are;
// flip off draws no flip in either crop.
TEST(AugmentSwitchTest, OffMeansUntouched) {
  InMemoryImageDataset ds = ColourDataset();
  BatchLoaderOptions o = Loader(&ds, 1);
  o.augment.color_jitter_prob = 0;
  o.augment.grayscale_prob = 0;
  EXPECT_FALSE(ColourAugmentationOn(o.augment));
  std::vector<int64_t> ids = {0, 1, 2, 3};
  auto prepared = ds.Prepare(ids, o.augment, 0, 0, 6);
  ASSERT_TRUE(prepared.ok());
  torch::Tensor before = prepared->images.clone();
  ApplyColourAugmentation(prepared->images, ids, o.augment, 0, 0, ds.mean(), ds.stddev());
  EXPECT_TRUE(torch::equal(before, prepared->images));
  // The loader without colour operations gives exactly PrepareImages' bits.
  const auto batches = AllBatches(o);
  BatchSchedule schedule(o.schedule);
  std::vector<int64_t> first;
  schedule.LocalIds(0, &first);
  auto direct = ds.Prepare(first, o.augment, 0, 0, 6);
  ASSERT_TRUE(direct.ok());
  EXPECT_TRUE(torch::equal(batches[0], direct->images));

  AugmentOptions flip_off;
  flip_off.horizontal_flip = false;
  flip_off.crop_min_scale = 0.5;
  for (int64_t id = 0; id < 100; ++id) {
    EXPECT_FALSE(DrawAugmentation(flip_off, 2, 0, 0, id).flip);
    EXPECT_FALSE(DrawResizedCrop(flip_off, 8, 8, 0, 0, id).flip);
  }
  // Grayscale and saturation leave a 1-channel image alone; augmentation off draws nothing.
  AugmentOptions grey = o.augment;
  grey.color_jitter_prob = 0;
  grey.grayscale_prob = 1;
  torch::Tensor single = torch::rand({2, 1, 6, 6});
  torch::Tensor kept = single.clone();
  ApplyColourAugmentation(single, {0, 1}, grey, 0, 0, {0.5f}, {0.5f});
  EXPECT_TRUE(torch::equal(single, kept));
  grey.enabled = false;
  EXPECT_FALSE(ColourAugmentationOn(grey));
  EXPECT_FALSE(DrawColour(grey, 0, 0, 3).grayscale);
}

// The probabilities: over many samples about p of them jitter / turn grey; the factors lie in
// their ranges and every order is a permutation.
TEST(ColourDrawTest, ProbabilitiesRangesAndOrders) {
  AugmentOptions a;
  a.seed = 11;
  a.color_jitter_prob = 0.8;
  a.jitter_brightness = 0.4;
  a.jitter_contrast = 1.5;
  a.jitter_saturation = 0.8;
  a.jitter_hue = 0.2;
  a.grayscale_prob = 0.2;
  int jitter = 0, grey = 0;
  const int n = 4000;
  for (int64_t id = 0; id < n; ++id) {
    const ColourDraw d = DrawColour(a, 0, 0, id);
    jitter += d.jitter;
    grey += d.grayscale;
    if (!d.jitter) continue;
    EXPECT_GE(d.brightness, 0.6);
    EXPECT_LE(d.brightness, 1.4);
    EXPECT_GE(d.contrast, 0.0);
    EXPECT_LE(d.contrast, 2.5);
    EXPECT_LE(std::abs(d.hue), 0.2);
    std::vector<int> seen(4, 0);
    for (int op : d.order) ++seen[static_cast<size_t>(op)];
    EXPECT_EQ(seen, (std::vector<int>{1, 1, 1, 1}));
  }
  EXPECT_NEAR(jitter / static_cast<double>(n), 0.8, 0.03);
  EXPECT_NEAR(grey / static_cast<double>(n), 0.2, 0.03);
}

// The colour operations against their definitions in float64 on one pixel grid.
TEST(ColourOpsTest, HandComputedFormulas) {
  // Pure colours: red (1,0,0) has hue 0, green 1/3, blue 2/3; saturation 1, value 1.
  torch::Tensor rgb = torch::zeros({3, 1, 3}, torch::kDouble);
  rgb[0][0][0] = 1;
  rgb[1][0][1] = 1;
  rgb[2][0][2] = 1;
  torch::Tensor hsv = RgbToHsv(rgb);
  EXPECT_NEAR(hsv[0][0][0].item<double>(), 0.0, 1e-12);
  EXPECT_NEAR(hsv[0][0][1].item<double>(), 1.0 / 3, 1e-12);
  EXPECT_NEAR(hsv[0][0][2].item<double>(), 2.0 / 3, 1e-12);
  EXPECT_NEAR(hsv[1].min().item<double>(), 1.0, 1e-12);
  // A hue shift of 1/3 turns red into green.
  torch::Tensor shifted = hsv.clone();
  shifted[0] = torch::fmod(shifted[0] + 1.0 / 3 + 1.0, 1.0);
  EXPECT_TRUE(torch::allclose(HsvToRgb(shifted).select(2, 0), rgb.select(2, 1), 0, 1e-12));
  // Round trip on random pixels.
  torch::manual_seed(2);
  torch::Tensor x = torch::rand({3, 5, 7}, torch::kDouble);
  EXPECT_TRUE(torch::allclose(HsvToRgb(RgbToHsv(x)), x, 0, 1e-12));
  // Grayscale is the luma.
  EXPECT_NEAR(Grayscale(x)[0][1][2].item<double>(),
              0.299 * x[0][1][2].item<double>() + 0.587 * x[1][1][2].item<double>() +
                  0.114 * x[2][1][2].item<double>(),
              1e-12);

  // A whole jitter on one image, against the formulas in order, in float64.
  AugmentOptions a;
  a.seed = 4;
  a.color_jitter_prob = 1;
  a.jitter_brightness = 0.5;
  a.jitter_contrast = 0.5;
  a.jitter_saturation = 0.5;
  a.jitter_hue = 0.1;
  const ColourDraw d = DrawColour(a, 0, 0, 9);
  ASSERT_TRUE(d.jitter);
  const std::vector<float> mean = {0.5f, 0.5f, 0.5f}, sd = {0.25f, 0.25f, 0.25f};
  torch::Tensor pixels = torch::rand({3, 4, 4}, torch::kDouble);
  torch::Tensor images = ((pixels - 0.5) / 0.25).unsqueeze(0).to(torch::kFloat);
  ApplyColourAugmentation(images, {9}, a, 0, 0, mean, sd);
  torch::Tensor want = pixels.clone();
  for (int op : d.order) {
    if (op == 0) want = (want * d.brightness).clamp(0, 1);
    if (op == 1) {
      const double m = (0.299 * want[0] + 0.587 * want[1] + 0.114 * want[2]).mean().item<double>();
      want = (want * d.contrast + m * (1 - d.contrast)).clamp(0, 1);
    }
    if (op == 2) {
      torch::Tensor g = (0.299 * want[0] + 0.587 * want[1] + 0.114 * want[2]).unsqueeze(0);
      want = (want * d.saturation + g * (1 - d.saturation)).clamp(0, 1);
    }
    if (op == 3) {
      torch::Tensor h = RgbToHsv(want);
      h[0] = torch::fmod(h[0] + d.hue + 1.0, 1.0);
      want = HsvToRgb(h);
    }
  }
  EXPECT_TRUE(torch::allclose(images[0].to(torch::kDouble), (want - 0.5) / 0.25, 0, 1e-4));
}

// Pixels as bytes (worker/train/image_bytes.h). Untouched pixels make the round trip
// exactly: the bytes are the dataset's own and normalising them gives the host's float bits.
// A resized, cropped or jittered batch (the loader with images_as_bytes) comes back within
// half a grey level of the float batch; values outside [0, 255] clamp; a channel count that
// is not the normalisation's is refused.
TEST(ImageBytesTest, PixelsRoundTripThroughTheHostsNormalisation) {
  InMemoryImageDataset ds = ColourDataset();
  const PixelNormalisation norm{ds.mean(), ds.stddev()};
  const PixelScaleShift cpu = PixelScaleShiftOn(norm, torch::kCPU);
  std::vector<int64_t> ids = {0, 5, 9, 23};
  torch::Tensor pixels = torch::empty({4, 3, 6, 6}, torch::kUInt8);
  ASSERT_TRUE(ds.Gather(ids.data(), 4, pixels.data_ptr<uint8_t>()).ok());
  AugmentOptions off;
  off.enabled = false;
  torch::Tensor host = PrepareImages(pixels, ids, off, 0, 0, ds.mean(), ds.stddev(), 6);
  EXPECT_TRUE(torch::equal(QuantiseImages(host, norm), pixels));
  EXPECT_TRUE(torch::equal(NormaliseImages(pixels, cpu), host));

  const float min_std = 0.2f;
  const double half_level = 0.5 / (255.0 * min_std) + 1e-5;
  torch::Tensor resized = PrepareImages(pixels, ids, off, 0, 0, ds.mean(), ds.stddev(), 11);
  torch::Tensor back = NormaliseImages(QuantiseImages(resized, norm), cpu);
  EXPECT_LE((back - resized).abs().max().item<double>(), half_level);

  BatchLoaderOptions as_float = Loader(&ds, 2), as_bytes = Loader(&ds, 2);
  as_bytes.images_as_bytes = true;
  const auto floats = AllBatches(as_float);
  const auto bytes = AllBatches(as_bytes);
  ASSERT_EQ(floats.size(), bytes.size());
  for (size_t b = 0; b < floats.size(); ++b) {
    ASSERT_EQ(bytes[b].scalar_type(), torch::kUInt8);
    ASSERT_EQ(bytes[b].sizes(), floats[b].sizes());
    torch::Tensor diff = (NormaliseImages(bytes[b], cpu) - floats[b]).abs();
    // Jitter can push a value past the pixel range; there the bytes hold the range's end.
    torch::Tensor raw = (floats[b] - cpu.shift) / cpu.scale;
    torch::Tensor inside = (raw >= 0) & (raw <= 255);
    EXPECT_GT(inside.sum().item<int64_t>(), 0);
    EXPECT_LE(diff.masked_select(inside).max().item<double>(), half_level) << "batch " << b;
  }

  torch::Tensor grey = torch::zeros({1, 1, 2, 2});
  EXPECT_THROW(NormaliseImages(grey.to(torch::kUInt8), cpu), c10::Error);
  EXPECT_THROW(QuantiseImages(grey, norm), c10::Error);
  // Channel 2 (mean 0.3, std 0.3): 0.5 is (0.5 * 0.3 + 0.3) * 255 = 114.75, so 115.
  torch::Tensor extreme = torch::tensor({-1000.0f, 1000.0f, 0.5f}).view({1, 3, 1, 1});
  EXPECT_TRUE(torch::equal(QuantiseImages(extreme, norm).flatten(),
                           torch::tensor({0, 255, 115}, torch::kUInt8)));
}

}  // namespace
}  // namespace mlcd::worker
