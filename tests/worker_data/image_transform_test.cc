// The train / eval transforms (worker/data/image_transform.h): RandomResizedCrop's window
// bounds, determinism and statistics; the centre-crop fallback, the eval resize + centre crop
// and the normalisation worked out by hand; the resampling against python3-torchvision's
// resized_crop / resize + center_crop (antialias=True) on the same pixels; and the JPEG DCT
// path close to the full decode.
#include "worker/data/image_transform.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <set>
#include <tuple>

#include "tests/testing/process.h"
#include "tests/worker_data/image_testing.h"

namespace mlcd::worker {
namespace {

using testing::EncodeJpeg;
using testing::EncodePng;
using testing::TestPattern;

TEST(ImageTransform, TrainCropsStayInsideTheScaleAndRatioBounds) {
  TransformParams p;
  const int h = 375, w = 500;
  int fallbacks = 0;
  for (int64_t id = 0; id < 3000; ++id) {
    const CropWindow c = DrawTrainCrop(p, h, w, SampleKey{0, 1, id});
    ASSERT_GE(c.top, 0);
    ASSERT_GE(c.left, 0);
    ASSERT_LE(c.top + c.height, h);
    ASSERT_LE(c.left + c.width, w);
    ASSERT_GT(c.height, 0);
    ASSERT_GT(c.width, 0);
    const double area = static_cast<double>(c.height) * c.width / (h * w);
    const double ratio = static_cast<double>(c.width) / c.height;
    if (c.height == h && c.width == w) ++fallbacks;
    // Rounding each side to whole pixels moves area and ratio a little beyond the bounds.
    ASSERT_GE(area, 0.08 * 0.97) << id;
    ASSERT_LE(area, 1.0);
    ASSERT_GE(ratio, 0.75 * 0.97) << id;
    ASSERT_LE(ratio, 4.0 / 3.0 * 1.03) << id;
  }
  EXPECT_LT(fallbacks, 30);  // 10 tries rarely all fail on a 4:3 image
}

TEST(ImageTransform, TrainCropsAreDeterministicPerSeedEpochAndId) {
  TransformParams p;
  p.seed = 42;
  auto same = [](const CropWindow& a, const CropWindow& b) {
    return std::tie(a.top, a.left, a.height, a.width, a.flip) ==
           std::tie(b.top, b.left, b.height, b.width, b.flip);
  };
  const CropWindow a = DrawTrainCrop(p, 300, 400, SampleKey{0, 3, 17});
  EXPECT_TRUE(same(a, DrawTrainCrop(p, 300, 400, SampleKey{0, 3, 17})));
  std::set<std::tuple<int, int, int, int>> distinct;
  for (const SampleKey& k : {SampleKey{0, 3, 18}, SampleKey{0, 4, 17}, SampleKey{1, 3, 17}}) {
    const CropWindow b = DrawTrainCrop(p, 300, 400, k);
    distinct.insert({b.top, b.left, b.height, b.width});
  }
  TransformParams q = p;
  q.seed = 43;
  const CropWindow c = DrawTrainCrop(q, 300, 400, SampleKey{0, 3, 17});
  distinct.insert({c.top, c.left, c.height, c.width});
  distinct.insert({a.top, a.left, a.height, a.width});
  EXPECT_EQ(distinct.size(), 5u);
}

// With scale in [0.08, 0.5] on a square image no draw is rejected (w, h <= sqrt(0.5 * 4/3) of
// the side), so the area fraction is uniform on [0.08, 0.5] and the log ratio uniform on
// [log 3/4, log 4/3]; the position is uniform over the free range; the flip is a fair coin.
TEST(ImageTransform, TrainCropStatisticsMatchTheDistributions) {
  TransformParams p;
  p.min_scale = 0.08;
  p.max_scale = 0.5;
  const int side = 1000, n = 20000;
  double area_sum = 0, log_ratio_sum = 0, log_ratio_sq = 0, centre_sum = 0;
  int flips = 0;
  for (int64_t id = 0; id < n; ++id) {
    const CropWindow c = DrawTrainCrop(p, side, side, SampleKey{0, 0, id});
    area_sum += static_cast<double>(c.height) * c.width / (side * side);
    const double lr = std::log(static_cast<double>(c.width) / c.height);
    log_ratio_sum += lr;
    log_ratio_sq += lr * lr;
    // The left edge is uniform on [0, side - width]: its mean relative position is 1/2.
    centre_sum += static_cast<double>(c.left) / (side - c.width);
    flips += c.flip;
  }
  const double half_range = std::log(4.0 / 3.0);
  EXPECT_NEAR(area_sum / n, 0.29, 0.004);                             // sd 0.121 / sqrt(n)
  EXPECT_NEAR(log_ratio_sum / n, 0.0, 0.005);                         // sd 0.166 / sqrt(n)
  EXPECT_NEAR(log_ratio_sq / n, half_range * half_range / 3, 0.002);  // uniform's variance
  EXPECT_NEAR(centre_sum / n, 0.5, 0.01);
  EXPECT_NEAR(static_cast<double>(flips) / n, 0.5, 0.015);
}

TEST(ImageTransform, CentreCropFallbackWhenNoTryFits) {
  TransformParams p;
  p.min_scale = p.max_scale = 1.0;  // the whole area at ratio <= 4/3 never fits 1000 x 100
  p.flip_probability = 0;
  const CropWindow c = DrawTrainCrop(p, 100, 1000, SampleKey{});
  EXPECT_EQ(c.height, 100);
  EXPECT_EQ(c.width, 133);  // round(100 * 4/3)
  EXPECT_EQ(c.top, 0);
  EXPECT_EQ(c.left, 433);  // (1000 - 133) // 2
  EXPECT_FALSE(c.flip);
  const CropWindow tall = DrawTrainCrop(p, 1000, 100, SampleKey{});
  EXPECT_EQ(tall.width, 100);
  EXPECT_EQ(tall.height, 133);  // round(100 / (3/4))
  EXPECT_EQ(tall.top, 433);
}

// A 3 x 3 RGB image resampled at scale 1 is the identity (triangle weights 1, 0): the output
// is (v / 255 - mean) / std per channel with CLIP's values; flipped, the columns mirror.
TEST(ImageTransform, NormalisationByHand) {
  Image img = TestPattern(3, 3, 3, 1);
  TransformParams p;
  p.image_size = 3;
  ResampleRegion r = TrainRegion(CropWindow{0, 0, 3, 3, false});
  std::vector<float> out(27), flipped(27);
  ResampleNormalize(img, r, p, out.data());
  r.flip = true;
  ResampleNormalize(img, r, p, flipped.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 3; ++x) {
        const double v = img.pixels[(y * 3 + x) * 3 + c];
        const double expected = (v / 255.0 - kClipMean[c]) / kClipStd[c];
        EXPECT_NEAR(out[c * 9 + y * 3 + x], expected, 1e-5);
        EXPECT_NEAR(flipped[c * 9 + y * 3 + (2 - x)], expected, 1e-5);
      }
}

// Eval on an 8 x 8 gray image with pixel 10 y + x: resize to 4 x 4 (scale 2: taps at offsets
// -1.5, -0.5, 0.5, 1.5 from the centre with weights 1/8, 3/8, 3/8, 1/8) keeps a linear image
// linear, sampled at source positions 2i + 0.5; the centre crop of 2 keeps rows / columns 1..2
// (sources 2.5 and 4.5): 27.5, 29.5 / 47.5, 49.5. Normalised with mean 0.5 and std 0.25.
TEST(ImageTransform, EvalResizeAndCentreCropByHand) {
  Image img;
  img.height = img.width = 8;
  img.channels = 1;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) img.pixels.push_back(static_cast<uint8_t>(10 * y + x));
  TransformParams p;
  p.channels = 1;
  p.image_size = 2;
  p.resize_size = 4;
  p.mean = {0.5f};
  p.stddev = {0.25f};
  std::vector<float> out(4);
  ResampleNormalize(img, EvalRegion(p, 8, 8), p, out.data());
  const double expected[4] = {27.5, 29.5, 47.5, 49.5};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], (expected[i] / 255.0 - 0.5) / 0.25, 1e-5) << i;
}

TEST(ImageTransform, EvalRegionFollowsTorchvisionSizes) {
  TransformParams p;  // 224, resize 256
  EXPECT_EQ(EffectiveResizeSize(p), 256);
  // 375 x 500 -> 256 x 341 (int(256 * 500 / 375) = 341); crop offsets round(16) and
  // round(58.5) = 58 (half to even).
  const ResampleRegion r = EvalRegion(p, 375, 500);
  EXPECT_NEAR(r.top, 16 * 375.0 / 256, 1e-9);
  EXPECT_NEAR(r.left, 58 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(r.height, 224 * 375.0 / 256, 1e-9);
  EXPECT_NEAR(r.width, 224 * 500.0 / 341, 1e-9);
}

std::vector<float> ReadFloats(const std::string& path, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  EXPECT_TRUE(in.good()) << path;
  return v;
}

// The resampling against torchvision's tensor path (float input, antialias=True): crops that
// shrink and enlarge, flipped, and the eval transform, RGB and gray.
TEST(ImageTransform, MatchesTorchvisionResizedCropAndCentreCrop) {
  const int h = 150, w = 200, s = 64;
  mlcd::testing::TempDir dir;
  std::vector<std::string> args = {
      std::string(MLCD_SOURCE_DIR) + "/tests/worker_data/torchvision_transform.py",
      std::to_string(s)};
  for (int channels : {3, 1}) {  // one python run for both (importing torch takes seconds)
    const std::string sub = dir.Sub(std::to_string(channels));
    ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
    const Image img = TestPattern(h, w, channels, 31);
    std::ofstream(sub + "/image.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(img.pixels.data()), img.pixels.size());
    TransformParams p;
    p.image_size = s;
    p.channels = channels;
    std::ofstream(sub + "/cases.txt")
        << "train 10 20 120 150 0\ntrain 5 7 40 33 1\ntrain 0 0 150 200 0\neval "
        << EffectiveResizeSize(p) << "\n";
    args.insert(args.end(), {sub, std::to_string(h), std::to_string(w), std::to_string(channels)});
  }
  std::string output;
  ASSERT_EQ(mlcd::testing::RunCommand("/usr/bin/python3", args, &output), 0) << output;
  for (int channels : {3, 1}) {
    const Image img = TestPattern(h, w, channels, 31);
    TransformParams p;
    p.image_size = s;
    p.channels = channels;
    const std::vector<ResampleRegion> regions = {
        TrainRegion(CropWindow{10, 20, 120, 150, false}),  // shrink (scale ~2)
        TrainRegion(CropWindow{5, 7, 40, 33, true}),       // enlarge, flipped
        TrainRegion(CropWindow{0, 0, 150, 200, false}),    // whole image, 3 x / 2.3 x
        EvalRegion(p, h, w)};                              // resize 73 + centre crop 64
    const size_t n = static_cast<size_t>(channels) * s * s;
    for (size_t i = 0; i < regions.size(); ++i) {
      std::vector<float> ours(n);
      ResampleNormalize(img, regions[i], p, ours.data());
      const std::vector<float> theirs =
          ReadFloats(dir.Sub(std::to_string(channels) + "/out_" + std::to_string(i) + ".bin"), n);
      double worst = 0;
      for (size_t k = 0; k < n; ++k)
        worst = std::max(worst, static_cast<double>(std::abs(ours[k] - theirs[k])));
      EXPECT_LT(worst, 1e-4) << "case " << i << ", " << channels << " channels";
    }
  }
}

double MeanAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double total = 0;
  for (size_t i = 0; i < a.size(); ++i) total += std::abs(a[i] - b[i]);
  return total / a.size();
}

// A large JPEG: eval and a large train crop decode at 1/4 or 1/2 in the DCT domain and stay
// within ~1.5 grey levels (0.02 normalised) of the full decode; PNG never scales.
TEST(ImageTransform, DctScaledDecodeIsCloseToTheFullDecode) {
  const Image img = TestPattern(1200, 1600, 3, 37);
  const std::string jpeg = EncodeJpeg(img, 92);
  TransformParams scaled, full;
  full.dct_scaling = false;
  const size_t n = 3 * 224 * 224;
  std::vector<float> a(n), b(n);
  auto run = [&](const std::string& bytes, const TransformParams& p, TransformMode mode,
                 std::vector<float>* out) {
    StatusOr<TransformTimings> t =
        DecodeAndTransform(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), p, mode,
                           SampleKey{0, 0, 5}, out->data());
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? t->decode_denominator : -1;
  };
  EXPECT_EQ(run(jpeg, scaled, TransformMode::kEval, &a), 4);  // crop 1050 -> 224
  EXPECT_EQ(run(jpeg, full, TransformMode::kEval, &b), 1);
  EXPECT_LT(MeanAbsDiff(a, b), 0.02);
  scaled.min_scale = full.min_scale = 0.9;  // crops of >= 0.9 of the area: >= 2x the output
  EXPECT_GE(run(jpeg, scaled, TransformMode::kTrain, &a), 2);
  EXPECT_EQ(run(jpeg, full, TransformMode::kTrain, &b), 1);
  EXPECT_LT(MeanAbsDiff(a, b), 0.02);
  EXPECT_EQ(run(EncodePng(TestPattern(600, 800, 3, 1)), scaled, TransformMode::kEval, &a), 1);
}

// Decoding only the crop's rows and columns changes nothing in the output, in train and eval,
// with and without DCT scaling.
TEST(ImageTransform, RegionDecodeGivesTheSameOutputAsTheWholeDecode) {
  const std::string jpeg = EncodeJpeg(TestPattern(375, 500, 3, 41), 90, true);
  const size_t n = 3 * 224 * 224;
  std::vector<float> a(n), b(n);
  for (bool dct : {true, false})
    for (TransformMode mode : {TransformMode::kTrain, TransformMode::kEval})
      for (int64_t id = 0; id < (mode == TransformMode::kTrain ? 40 : 1); ++id) {
        TransformParams p;
        p.dct_scaling = dct;
        TransformParams whole = p;
        whole.region_decode = false;
        for (auto [params, out] : {std::pair{&p, &a}, std::pair{&whole, &b}})
          ASSERT_TRUE(DecodeAndTransform(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(),
                                         *params, mode, SampleKey{0, 0, id}, out->data())
                          .ok());
        double worst = 0;
        for (size_t i = 0; i < n; ++i)
          worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
        ASSERT_LT(worst, 1e-5) << "sample " << id << ", dct " << dct;
      }
}

// Degenerate shapes (a 1-pixel strip, a single pixel) go through both transforms to finite
// values: the crop falls back, the filters stay within the image.
TEST(ImageTransform, StripsAndSinglePixelsGiveFiniteOutput) {
  TransformParams p;
  p.image_size = 16;
  std::vector<float> out(3 * 16 * 16);
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{1, 4000}, {4000, 1}, {1, 1}, {2, 3}})
    for (const std::string& bytes :
         {EncodePng(TestPattern(h, w, 3, 5)), EncodeJpeg(TestPattern(h, w, 3, 5), 90)})
      for (TransformMode mode : {TransformMode::kTrain, TransformMode::kEval}) {
        std::fill(out.begin(), out.end(), std::nanf(""));
        StatusOr<TransformTimings> t =
            DecodeAndTransform(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), p,
                               mode, SampleKey{0, 0, h}, out.data());
        ASSERT_TRUE(t.ok()) << h << "x" << w << ": " << t.status().ToString();
        for (float v : out) ASSERT_TRUE(std::isfinite(v)) << h << "x" << w;
      }
}

TEST(ImageTransform, GraySourcesFillEveryChannelAndBadParamsAreRefused) {
  const std::string jpeg = EncodeJpeg(TestPattern(300, 260, 1, 3), 90);
  TransformParams p;
  p.mean = {0.5f, 0.5f, 0.5f};
  p.stddev = {0.5f, 0.5f, 0.5f};
  std::vector<float> out(3 * 224 * 224);
  ASSERT_TRUE(DecodeAndTransform(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), p,
                                 TransformMode::kTrain, SampleKey{}, out.data())
                  .ok());
  for (size_t i = 0; i < 224 * 224; ++i) {
    ASSERT_EQ(out[i], out[i + 224 * 224]);
    ASSERT_EQ(out[i], out[i + 2 * 224 * 224]);
  }
  for (auto mutate :
       std::vector<void (*)(TransformParams*)>{[](TransformParams* q) { q->image_size = 0; },
                                               [](TransformParams* q) { q->channels = 2; },
                                               [](TransformParams* q) { q->resize_size = 100; },
                                               [](TransformParams* q) { q->min_scale = 0; },
                                               [](TransformParams* q) { q->max_ratio = 0.5; },
                                               [](TransformParams* q) { q->flip_probability = 2; },
                                               [](TransformParams* q) { q->mean = {0.5f}; },
                                               [](TransformParams* q) {
                                                 q->stddev = {0.f, 1.f, 1.f};
                                               }}) {
    TransformParams q;
    mutate(&q);
    EXPECT_EQ(ValidateTransformParams(q).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(ValidateTransformParams(TransformParams{}).ok());
}

}  // namespace
}  // namespace mlcd::worker
