// From encoded image bytes to the model's float input: the training augmentation
// (torchvision's RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize) and the
// evaluation / extraction transform (Resize of the shorter side + CenterCrop + ToTensor +
// Normalize), written as float CHW into a caller's buffer. No torch.
//
// The crop is drawn from the header's size BEFORE decoding, so a JPEG whose crop is much
// larger than the output is decoded at 1/2, 1/4 or 1/8 size in the DCT domain (the smallest
// scale at which the crop still has >= image_size pixels on each side), and only the rows and
// iMCU columns the crop's filter reads are decoded (libjpeg-turbo's scanline skip and crop).
//
// Resampling is torchvision's antialiased bilinear (antialias=True, the same triangle filter
// as PIL's BILINEAR: support widened by the scale factor when shrinking, weights normalised
// inside the source region). Differences from torchvision + PIL, documented and tested:
//   - we keep floats between the two filter passes and before normalising; PIL rounds to
//     uint8 after each pass, so values differ by up to ~1/255 before normalisation;
//   - with DCT scaling the filter runs on the reduced image (libjpeg's scaled IDCT does the
//     first part of the shrinking), so pixels differ by a few levels from a full decode;
//   - the draws come from SplitMix64 seeded by (seed, round, epoch, sample id), so the crops
//     are reproducible and independent of threads, batches and ranks, but not torch's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker/data/decode_budget.h"
#include "worker/data/image_decode.h"

namespace mlcd::worker {

// CLIP's normalisation (OpenAI CLIP, open_clip), the default.
constexpr float kClipMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
constexpr float kClipStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};

// The largest output side the transform accepts (one constant per limit).
constexpr int kMaxTransformImageSize = 4096;

struct TransformParams {
  // Output side S: the model's image_size. The output is [channels, S, S].
  int image_size = 224;
  // 3: RGB (gray sources replicated); 1: gray (colour sources by ITU-R 601 luma).
  int channels = 3;
  // Evaluation: the shorter side is resized to this before the centre crop. 0 = the usual
  // image_size * 256 / 224 (256 for 224). Must be >= image_size.
  int resize_size = 0;
  // RandomResizedCrop: the crop's area as a fraction of the image, uniform in
  // [min_scale, max_scale], and its aspect ratio (width / height), log-uniform in
  // [min_ratio, max_ratio]. torchvision's defaults.
  double min_scale = 0.08;
  double max_scale = 1.0;
  double min_ratio = 3.0 / 4.0;
  double max_ratio = 4.0 / 3.0;
  // Probability of a left-right flip (training).
  double flip_probability = 0.5;
  // Per output channel; empty = CLIP's values (for 1 channel, the mean of CLIP's three).
  std::vector<float> mean;
  std::vector<float> stddev;
  // JPEG: decode at a reduced scale when the crop allows (see the top of this file).
  bool dct_scaling = true;
  // JPEG: decode only the rows and columns the crop reads (see image_decode.h's
  // DecodeOptions::region); the pixels are the same as from a whole decode.
  bool region_decode = true;
  // Seed of the augmentation draws.
  uint64_t seed = 0;
};

enum class TransformMode { kTrain, kEval };

// INVALID_ARGUMENT naming the field and the allowed range.
Status ValidateTransformParams(const TransformParams& params);

// image_size * 256 / 224 when resize_size is 0, else resize_size.
int EffectiveResizeSize(const TransformParams& params);
// The mean / stddev per output channel (the defaults filled in).
std::vector<float> EffectiveMean(const TransformParams& params);
std::vector<float> EffectiveStd(const TransformParams& params);

// Whose augmentation draws these are: the same key gives the same crop and flip. `view`
// (two-view contrastive batches): view 0 draws what a one-view run draws, view v > 0 its own.
struct SampleKey {
  int round = 0;
  int epoch = 0;
  int64_t id = 0;
  int view = 0;
};

// A crop in pixels of the full-size source: rows [top, top + height), columns
// [left, left + width), then flipped left-right when `flip`.
struct CropWindow {
  int top = 0, left = 0, height = 0, width = 0;
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params on an image of height x width: up to 10 tries of
// (area fraction, log ratio) whose rounded window fits, at a uniform integer position; else
// the centre crop clamped to the ratio bounds. Plus the flip draw.
CropWindow DrawTrainCrop(const TransformParams& params, int height, int width,
                         const SampleKey& key);

// A region of the source in real-valued pixels, resampled to S x S. Filter taps are limited to
// [clip_top, clip_bottom) x [clip_left, clip_right) (the crop for training, like PIL cropping
// first; the whole image for evaluation, like PIL resizing first).
struct ResampleRegion {
  double top = 0, left = 0, height = 0, width = 0;
  int clip_top = 0, clip_left = 0, clip_bottom = 0, clip_right = 0;
  bool flip = false;
};

ResampleRegion TrainRegion(const CropWindow& crop);
// Resize shorter side to EffectiveResizeSize (longer side truncated, as torchvision) + centre
// crop of image_size (offsets rounded as torchvision's CenterCrop).
ResampleRegion EvalRegion(const TransformParams& params, int height, int width);

// The region mapped onto an image decoded at decoded_height x decoded_width from a source of
// height x width (a DCT-scaled JPEG); the clip bounds are rounded outwards.
ResampleRegion ScaleRegion(const ResampleRegion& region, int height, int width, int decoded_height,
                           int decoded_width);

// Resamples `region` of `image` (image.channels == params.channels) to S x S, flips when the
// region says so, and writes (v / 255 - mean[c]) / stddev[c] as float CHW to `out`
// (channels * S * S floats). The region must lie inside the image.
void ResampleNormalize(const Image& image, const ResampleRegion& region,
                       const TransformParams& params, float* out);

// Where one sample's time went (seconds, wall clock on the calling thread).
struct TransformTimings {
  double decode_seconds = 0;     // header + decode
  double transform_seconds = 0;  // crop, resize, flip, normalise
  int decode_denominator = 1;    // JPEG DCT scale used: 1, 2, 4 or 8
};

// The whole path for one sample: header, crop (train: DrawTrainCrop with `key`; eval:
// EvalRegion), decode (DCT-scaled when allowed), ResampleNormalize into `out`. Errors are
// those of ReadImageHeader / DecodeImage (DATA_LOSS, INVALID_ARGUMENT); params must be valid.
// With a `budget`, the decoded pixels (DecodedImageBytes) are reserved from it between the
// header and the end of the transform (waiting while other threads hold it); an image larger
// than the whole budget is INVALID_ARGUMENT, before any pixel is decoded.
StatusOr<TransformTimings> DecodeAndTransform(const uint8_t* data, size_t size,
                                              const TransformParams& params, TransformMode mode,
                                              const SampleKey& key, float* out,
                                              DecodeMemoryBudget* budget = nullptr);

}  // namespace mlcd::worker
