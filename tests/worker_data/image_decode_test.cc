// Decoding (worker/data/image_decode.h) on real images encoded at test time by libpng,
// TurboJPEG and libwebp: lossless round trips exact (PNG of every colour type and depth, WebP
// lossless), JPEG and lossy WebP within a tolerance, DCT-scaled JPEG decoding against a full
// decode + box filter, and every kind of bad input giving the right error without a crash.
#include "worker/data/image_decode.h"

#include <gtest/gtest.h>
#include <png.h>

#include "common/random.h"
#include "tests/worker_data/image_testing.h"

namespace mlcd::worker {
namespace {

using testing::Compare;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::EncodeWebp;
using testing::TestPattern;

DecodeOptions Options(int channels, double min_scale = 1.0) {
  DecodeOptions o;
  o.channels = channels;
  o.min_scale = min_scale;
  return o;
}

Image MustDecode(const std::string& bytes, const DecodeOptions& options = {}) {
  StatusOr<Image> image = DecodeImage(bytes, options);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? *std::move(image) : Image{};
}

Status DecodeStatus(const std::string& bytes) { return DecodeImage(bytes).status(); }

TEST(ImageDecode, PngRgbAndGrayRoundTripExactly) {
  for (int channels : {1, 3}) {
    const Image original = TestPattern(37, 53, channels, 7);
    const Image decoded = MustDecode(EncodePng(original), Options(channels));
    EXPECT_EQ(decoded.height, 37);
    EXPECT_EQ(decoded.width, 53);
    EXPECT_EQ(decoded.channels, channels);
    EXPECT_EQ(decoded.pixels, original.pixels) << channels << " channels";
  }
}

TEST(ImageDecode, GrayIsReplicatedToRgbAndRgbBecomesLuma) {
  const Image gray = TestPattern(20, 30, 1, 3);
  const Image rgb = MustDecode(EncodePng(gray), Options(3));
  ASSERT_EQ(rgb.pixels.size(), gray.pixels.size() * 3);
  for (size_t i = 0; i < gray.pixels.size(); ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(rgb.pixels[3 * i + c], gray.pixels[i]);

  const Image color = TestPattern(20, 30, 3, 4);
  const Image luma = MustDecode(EncodePng(color), Options(1));
  ASSERT_EQ(luma.pixels.size(), gray.pixels.size());
  for (size_t i = 0; i < luma.pixels.size(); ++i) {
    const double r = color.pixels[3 * i], g = color.pixels[3 * i + 1], b = color.pixels[3 * i + 2];
    ASSERT_NEAR(luma.pixels[i], 0.299 * r + 0.587 * g + 0.114 * b, 0.51) << i;
  }
}

TEST(ImageDecode, SixteenBitPngIsScaledWithRounding) {
  const int h = 16, w = 64;
  std::vector<uint16_t> gray(h * w), rgb(h * w * 3);
  SplitMix rng(11);
  for (auto& v : gray) v = static_cast<uint16_t>(rng.Below(65536));
  for (auto& v : rgb) v = static_cast<uint16_t>(rng.Below(65536));
  gray[0] = 0, gray[1] = 65535, gray[2] = 128, gray[3] = 129;
  auto expect_scaled = [](const std::vector<uint16_t>& in, const Image& out) {
    ASSERT_EQ(out.pixels.size(), in.size());
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out.pixels[i], static_cast<int>(std::lround(in[i] * 255.0 / 65535.0)))
          << "sample " << i << " = " << in[i];
  };
  expect_scaled(gray, MustDecode(EncodePng(h, w, PNG_COLOR_TYPE_GRAY, 16, gray), Options(1)));
  expect_scaled(rgb, MustDecode(EncodePng(h, w, PNG_COLOR_TYPE_RGB, 16, rgb), Options(3)));
}

TEST(ImageDecode, PalettePngIsExpandedToRgb) {
  const int h = 9, w = 13;
  std::vector<uint8_t> palette;
  for (int i = 0; i < 16; ++i)
    palette.insert(palette.end(), {static_cast<uint8_t>(i * 16), static_cast<uint8_t>(255 - i * 9),
                                   static_cast<uint8_t>((i * 77) % 256)});
  for (int depth : {4, 8}) {
    std::vector<uint16_t> index(h * w);
    for (int i = 0; i < h * w; ++i) index[i] = static_cast<uint16_t>((i * 7) % 16);
    const Image out = MustDecode(EncodePng(h, w, PNG_COLOR_TYPE_PALETTE, depth, index, palette));
    ASSERT_EQ(out.channels, 3);
    for (int i = 0; i < h * w; ++i)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(out.pixels[3 * i + c], palette[3 * index[i] + c]) << depth << "-bit, pixel " << i;
  }
}

TEST(ImageDecode, AlphaIsDroppedAndLowBitGrayExpanded) {
  const int h = 5, w = 11;
  std::vector<uint16_t> ga(h * w * 2), rgba(h * w * 4), bits(h * w);
  for (size_t i = 0; i < ga.size(); ++i) ga[i] = static_cast<uint16_t>((i * 37) % 256);
  for (size_t i = 0; i < rgba.size(); ++i) rgba[i] = static_cast<uint16_t>((i * 53) % 256);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i % 3 == 0);
  const Image g = MustDecode(EncodePng(h, w, PNG_COLOR_TYPE_GRAY_ALPHA, 8, ga), Options(1));
  for (int i = 0; i < h * w; ++i) ASSERT_EQ(g.pixels[i], ga[2 * i]);
  const Image c = MustDecode(EncodePng(h, w, PNG_COLOR_TYPE_RGBA, 8, rgba));
  for (int i = 0; i < h * w; ++i)
    for (int k = 0; k < 3; ++k) ASSERT_EQ(c.pixels[3 * i + k], rgba[4 * i + k]);
  const Image one = MustDecode(EncodePng(h, w, PNG_COLOR_TYPE_GRAY, 1, bits), Options(1));
  for (int i = 0; i < h * w; ++i) ASSERT_EQ(one.pixels[i], bits[i] ? 255 : 0);
}

TEST(ImageDecode, InterlacedPngRoundTripsExactly) {
  const Image original = TestPattern(31, 17, 3, 9);
  std::vector<uint16_t> samples(original.pixels.begin(), original.pixels.end());
  const std::string png = EncodePng(31, 17, PNG_COLOR_TYPE_RGB, 8, samples, {}, true);
  EXPECT_EQ(MustDecode(png).pixels, original.pixels);
}

TEST(ImageDecode, WebpLosslessExactAndLossyClose) {
  const Image original = TestPattern(40, 60, 3, 5);
  EXPECT_EQ(MustDecode(EncodeWebp(original, true)).pixels, original.pixels);
  const auto lossy = Compare(MustDecode(EncodeWebp(original, false, 90)), original);
  EXPECT_LT(lossy.mean, 4.0);
  const Image gray = TestPattern(40, 60, 1, 5);
  EXPECT_EQ(MustDecode(EncodeWebp(gray, true), Options(1)).pixels, gray.pixels);
}

TEST(ImageDecode, JpegRgbAndGrayWithinTolerance) {
  for (int channels : {1, 3}) {
    const Image original = TestPattern(120, 160, channels, 21);
    const Image decoded = MustDecode(EncodeJpeg(original, 95), Options(channels));
    ASSERT_EQ(decoded.width, 160);
    ASSERT_EQ(decoded.height, 120);
    const auto diff = Compare(decoded, original);
    EXPECT_LT(diff.mean, 2.0) << channels;
    EXPECT_LT(diff.max, 40) << channels;
  }
  // A gray JPEG as RGB: three equal channels.
  const Image rgb = MustDecode(EncodeJpeg(TestPattern(30, 40, 1, 2), 90), Options(3));
  for (size_t i = 0; i < rgb.pixels.size(); i += 3) {
    ASSERT_EQ(rgb.pixels[i], rgb.pixels[i + 1]);
    ASSERT_EQ(rgb.pixels[i], rgb.pixels[i + 2]);
  }
}

// Box-filters `full` by `d` (partial blocks at the edges average what they have).
Image BoxDownscale(const Image& full, int d) {
  Image out;
  out.height = ScaledSize(full.height, d);
  out.width = ScaledSize(full.width, d);
  out.channels = full.channels;
  out.pixels.resize(static_cast<size_t>(out.height) * out.width * out.channels);
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x)
      for (int c = 0; c < out.channels; ++c) {
        double sum = 0;
        int n = 0;
        for (int yy = y * d; yy < std::min(full.height, (y + 1) * d); ++yy)
          for (int xx = x * d; xx < std::min(full.width, (x + 1) * d); ++xx, ++n)
            sum += full.pixels[(static_cast<size_t>(yy) * full.width + xx) * full.channels + c];
        out.pixels[(static_cast<size_t>(y) * out.width + x) * out.channels + c] =
            static_cast<uint8_t>(std::lround(sum / n));
      }
  return out;
}

TEST(ImageDecode, DctScalingPicksTheSmallestSufficientScale) {
  EXPECT_EQ(JpegScaleDenominator(1.0), 1);
  EXPECT_EQ(JpegScaleDenominator(0.51), 1);
  EXPECT_EQ(JpegScaleDenominator(0.5), 2);
  EXPECT_EQ(JpegScaleDenominator(0.26), 2);
  EXPECT_EQ(JpegScaleDenominator(0.25), 4);
  EXPECT_EQ(JpegScaleDenominator(0.2), 4);
  EXPECT_EQ(JpegScaleDenominator(0.125), 8);
  EXPECT_EQ(JpegScaleDenominator(0.01), 8);

  const Image original = TestPattern(483, 641, 3, 13);
  const std::string jpeg = EncodeJpeg(original, 92);
  const Image full = MustDecode(jpeg);
  for (const auto& [min_scale, d] :
       std::vector<std::pair<double, int>>{{0.3, 2}, {0.2, 4}, {0.1, 8}}) {
    const Image scaled = MustDecode(jpeg, Options(3, min_scale));
    EXPECT_EQ(scaled.height, (483 + d - 1) / d) << d;
    EXPECT_EQ(scaled.width, (641 + d - 1) / d) << d;
    const auto diff = Compare(scaled, BoxDownscale(full, d));
    EXPECT_LT(diff.mean, 2.5) << "1/" << d;
  }
}

// A region decode (rows skipped, iMCU columns cropped) gives exactly the pixels of the whole
// decode inside the rectangle (at the decode scale), for 4:4:4, 4:2:0, gray and progressive
// JPEGs at every DCT scale.
TEST(ImageDecode, RegionDecodeEqualsTheWholeDecodeInsideTheRegion) {
  const Image rgb = TestPattern(375, 500, 3, 29), gray = TestPattern(375, 500, 1, 29);
  const std::vector<std::pair<std::string, int>> jpegs = {{EncodeJpeg(rgb, 90), 3},
                                                          {EncodeJpeg(rgb, 90, true), 3},
                                                          {EncodeJpeg(gray, 90), 1},
                                                          {EncodeJpeg(rgb, 90, true, true), 3}};
  const std::vector<PixelRect> rects = {
      {0, 0, 375, 500}, {37, 101, 200, 150}, {300, 450, 75, 50}, {0, 250, 10, 250}, {123, 0, 1, 1}};
  int partial = 0;
  for (const auto& [jpeg, channels] : jpegs)
    for (double min_scale : {1.0, 0.5, 0.25, 0.125})
      for (const PixelRect& rect : rects) {
        DecodeOptions options = Options(channels, min_scale);
        const Image whole = MustDecode(jpeg, options);
        options.region = rect;
        const Image part = MustDecode(jpeg, options);
        const int d = JpegScaleDenominator(min_scale);
        ASSERT_EQ(part.decoded_height, whole.height);
        ASSERT_EQ(part.decoded_width, whole.width);
        // The window covers the rectangle at this scale.
        ASSERT_LE(part.origin_y, rect.top / d);
        ASSERT_LE(part.origin_x, rect.left / d);
        ASSERT_GE(part.origin_y + part.height,
                  std::min(whole.height, (rect.top + rect.height) / d));
        ASSERT_GE(part.origin_x + part.width, std::min(whole.width, (rect.left + rect.width) / d));
        partial += part.height < whole.height || part.width < whole.width;
        const int y0 = rect.top / d, x0 = rect.left / d;
        const int y1 = std::min(whole.height, (rect.top + rect.height + d - 1) / d);
        const int x1 = std::min(whole.width, (rect.left + rect.width + d - 1) / d);
        for (int y = y0; y < y1; ++y)
          for (int x = x0 * channels; x < x1 * channels; ++x)
            ASSERT_EQ(part.pixels[static_cast<size_t>(y - part.origin_y) * part.width * channels +
                                  x - part.origin_x * channels],
                      whole.pixels[static_cast<size_t>(y) * whole.width * channels + x])
                << "channels " << channels << ", 1/" << d << ", rect " << rect.top << ","
                << rect.left << " at " << y << "," << x;
      }
  EXPECT_GT(partial, 30);  // most of them really were partial decodes
  // A truncated file is decoded whole, so the truncation is reported whatever the region.
  const std::string cut = jpegs[0].first.substr(0, jpegs[0].first.size() * 3 / 4);
  DecodeOptions options;
  options.region = {0, 0, 10, 10};
  const Status s = DecodeImage(cut, options).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
}

TEST(ImageDecode, HeaderGivesSizeAndChannelsForEveryFormat) {
  const Image rgb = TestPattern(21, 34, 3, 1), gray = TestPattern(21, 34, 1, 1);
  struct Case {
    std::string bytes;
    ImageFormat format;
    int channels;
  };
  for (const Case& c :
       {Case{EncodeJpeg(rgb, 90), ImageFormat::kJpeg, 3},
        Case{EncodeJpeg(gray, 90), ImageFormat::kJpeg, 1},
        Case{EncodePng(rgb), ImageFormat::kPng, 3}, Case{EncodePng(gray), ImageFormat::kPng, 1},
        Case{EncodeWebp(rgb, true), ImageFormat::kWebp, 3}}) {
    StatusOr<ImageHeader> h =
        ReadImageHeader(reinterpret_cast<const uint8_t*>(c.bytes.data()), c.bytes.size());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->format, c.format);
    EXPECT_EQ(h->height, 21);
    EXPECT_EQ(h->width, 34);
    EXPECT_EQ(h->channels, c.channels) << ImageFormatName(c.format);
  }
}

TEST(ImageDecode, EmptyGarbageAndUnknownFormatsAreNamed) {
  Status s = DecodeStatus("");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("empty (0 bytes)"), std::string::npos) << s.ToString();

  s = DecodeStatus("<!DOCTYPE html><html>Not Found</html>");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("3c 21 44 4f"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("<!DOCTYP"), std::string::npos) << s.ToString();

  s = DecodeStatus(std::string("GIF89a\x01\x00\x01\x00\x00\x00\x00", 13));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("GIF"), std::string::npos) << s.ToString();

  s = DecodeStatus(std::string("\xFF\xD8", 2));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
}

TEST(ImageDecode, TruncatedImagesAreDataLossSayingSo) {
  const Image image = TestPattern(64, 96, 3, 17);
  for (const std::string& full :
       {EncodeJpeg(image, 90), EncodePng(image), EncodeWebp(image, false, 80)}) {
    const std::string cut = full.substr(0, full.size() / 2);
    Status s = DecodeStatus(cut);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
  }
}

TEST(ImageDecode, CorruptHeadersAndChecksumsAreDataLoss) {
  const Image image = TestPattern(32, 32, 3, 19);
  std::string png = EncodePng(image);
  png[20] ^= 0x5A;  // inside IHDR: its CRC no longer matches
  Status s = DecodeStatus(png);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("corrupt PNG"), std::string::npos) << s.ToString();

  std::string jpeg = EncodeJpeg(image, 90);
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 4] = 0x00;  // segment length 0
  jpeg[sof + 5] = 0x00;
  s = DecodeStatus(jpeg);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
}

TEST(ImageDecode, AFailedJpegDoesNotSpoilTheNextOneOnTheSameThread) {
  const Image image = TestPattern(24, 24, 3, 3);
  const std::string good = EncodeJpeg(image, 90);
  const Image expected = MustDecode(good);
  for (const std::string& bad : {good.substr(0, 100), good.substr(0, good.size() / 2),
                                 std::string("\xFF\xD8\xFF\xDB\x00\x43garbage", 13)}) {
    EXPECT_FALSE(DecodeImage(bad).ok());
    EXPECT_FALSE(ReadImageHeader(reinterpret_cast<const uint8_t*>(bad.data()), bad.size()).ok());
    EXPECT_EQ(MustDecode(good).pixels, expected.pixels);
  }
}

TEST(ImageDecode, HugeImagesAreRefusedBeforeDecoding) {
  std::string jpeg = EncodeJpeg(TestPattern(16, 16, 3, 1), 90);
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  // SOF0: FF C0, length (2), precision (1), height (2), width (2).
  jpeg[sof + 5] = static_cast<char>(0xC3), jpeg[sof + 6] = 0x50;  // 50000
  jpeg[sof + 7] = static_cast<char>(0xC3), jpeg[sof + 8] = 0x50;
  Status s = DecodeStatus(jpeg);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("50000x50000"), std::string::npos) << s.ToString();
}

// Random truncations and byte flips of every format: an image or a DATA_LOSS /
// INVALID_ARGUMENT, never a crash, an exit or another code.
TEST(ImageDecode, MutatedImagesNeverCrash) {
  const Image image = TestPattern(48, 40, 3, 23);
  SplitMix rng(99);
  int errors = 0, total = 0;
  for (const std::string& original :
       {EncodeJpeg(image, 85), EncodeJpeg(image, 85, true), EncodeJpeg(image, 85, true, true),
        EncodePng(image), EncodeWebp(image, true), EncodeWebp(image, false)}) {
    for (int trial = 0; trial < 150; ++trial) {
      std::string bytes = original;
      if (trial % 3 == 0) bytes.resize(rng.Below(bytes.size()));
      const int flips = 1 + static_cast<int>(rng.Below(8));
      for (int f = 0; f < flips && !bytes.empty(); ++f)
        bytes[rng.Below(bytes.size())] = static_cast<char>(rng.Below(256));
      for (int channels : {1, 3}) {
        DecodeOptions options = Options(channels, 0.3);
        if (trial % 2) options.region = {5, 7, 20, 20};  // the region decoder too
        StatusOr<Image> out = DecodeImage(bytes, options);
        ++total;
        if (out.ok()) {
          ASSERT_EQ(out->pixels.size(), static_cast<size_t>(out->height) * out->width * channels);
          continue;
        }
        ++errors;
        const StatusCode code = out.status().code();
        ASSERT_TRUE(code == StatusCode::kDataLoss || code == StatusCode::kInvalidArgument)
            << out.status().ToString();
      }
    }
  }
  EXPECT_GT(errors, total / 4);  // the mutations did reach the decoders' error paths
}

TEST(ImageDecode, OptionsOutOfRangeAreInvalidArgument) {
  const std::string png = EncodePng(TestPattern(4, 4, 3, 1));
  EXPECT_EQ(DecodeImage(png, Options(2)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeImage(png, Options(3, 0)).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlcd::worker
