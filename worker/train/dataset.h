// Training images: a dataset interface, the Fashion-MNIST implementation (IDX files from
// Debian's dataset-fashion-mnist, held in memory as uint8), batched augmentation, and a
// background loader that prepares the next batches while the current step computes. Image
// folders and WebDataset shards (encoded images read through a dataset index, decoded by a
// pool of threads) implement the same interface: worker/train/indexed_dataset.h.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/dataset/annotations.h"
#include "common/prefetch_queue.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/train/bad_samples.h"
#include "worker/train/sample_order.h"

namespace mlcd::worker {

struct AugmentOptions;

// The model input of a batch (ImageDataset::Prepare).
struct PreparedImages {
  torch::Tensor images;  // float [n, C, S, S]
  // Samples that could not be read or decoded, in slot order.
  std::vector<BadSample> bad;
  // (slot, source slot): a bad slot holds the image of a good sample of the same batch, so
  // the batch keeps its size on every rank; its labels must be the source's too
  // (ApplyReplacements).
  std::vector<std::pair<int64_t, int64_t>> replaced;
};

// Copies the label rows of each replacement's source slot over its bad slot (`labels` is
// n x labels_per_sample, row-major).
void ApplyReplacements(const std::vector<std::pair<int64_t, int64_t>>& replaced,
                       int labels_per_sample, std::vector<int32_t>* labels);

// Images addressed by sample id 0..size()-1 (the row index of the split; the same ids as
// feature shards and label sets).
class ImageDataset {
 public:
  virtual ~ImageDataset() = default;
  // "fashion-mnist train (60000 images, 28x28x1)".
  virtual std::string Describe() const = 0;
  virtual int64_t size() const = 0;
  virtual int channels() const = 0;
  virtual int height() const = 0;
  virtual int width() const = 0;
  // Copies the pixels of `n` samples into `out` ([n, C, H, W] uint8, CHW per image).
  // INVALID_ARGUMENT naming the id when one is out of range.
  virtual Status Gather(const int64_t* ids, int64_t n, uint8_t* out) const = 0;
  // Per-channel mean and standard deviation of the pixels scaled to [0, 1] (normalisation).
  virtual std::vector<float> mean() const = 0;
  virtual std::vector<float> stddev() const = 0;
  // Ground-truth class of each sample when the dataset has one (evaluation), else empty.
  virtual const std::vector<int32_t>& class_labels() const = 0;
  // Multi-label sets and named attributes of the samples (common/dataset/annotations.h; one
  // entry per sample id, the same ids as images), empty when the dataset has none. WebDataset
  // shards with an annotations.json have them (docs/data.md, "Annotations").
  virtual const DatasetAnnotations& annotations() const;
  // The model input of samples `ids` ([n, C, S, S] float, normalised, S = image_size): the
  // training augmentation when augment.enabled (draws from (seed, round, epoch, id)), the
  // evaluation transform otherwise. The default gathers the uint8 pixels and runs
  // PrepareImages (no sample is ever bad). Encoded datasets decode in their own pool and
  // report the samples they could not decode (PreparedImages::bad / replaced); a batch in
  // which every sample is bad is DATA_LOSS. Called from one thread at a time.
  virtual StatusOr<PreparedImages> Prepare(const std::vector<int64_t>& ids,
                                           const AugmentOptions& augment, int round, int epoch,
                                           int image_size) const;
  // The largest fraction of samples that may be bad (dataset.max_bad_fraction).
  virtual double max_bad_fraction() const { return 0; }
  // Sample i's key for messages ("000017", "cat/1.jpg"); the id as text by default.
  virtual std::string key(int64_t id) const { return std::to_string(id); }
};

// Opens `split` ("train" or "test") of the dataset a spec names, keeping the first
// dataset.limit images when limit > 0 (the train split only; `test_limit` for the test
// split). Fashion-MNIST: reads the IDX files under dataset.path (gzipped or not); NOT_FOUND
// with an install hint when they are missing. image-folder / webdataset: loads dataset.index
// (test_index for "test") and checks its fingerprint (FAILED_PRECONDITION naming a missing or
// changed file), decoding to the channels and image size of `model` (required for them).
// INVALID_ARGUMENT for an unknown format.
StatusOr<std::unique_ptr<ImageDataset>> OpenImageDataset(const v1::DatasetSpec& dataset,
                                                         const std::string& split,
                                                         int64_t test_limit = 0,
                                                         const v1::ModelSpec* model = nullptr);

// An in-memory uint8 dataset (Fashion-MNIST uses it; tests can build one).
class InMemoryImageDataset : public ImageDataset {
 public:
  InMemoryImageDataset(std::string name, int64_t count, int channels, int height, int width,
                       std::vector<uint8_t> pixels, std::vector<int32_t> class_labels,
                       std::vector<float> mean, std::vector<float> stddev);
  std::string Describe() const override;
  int64_t size() const override { return count_; }
  int channels() const override { return channels_; }
  int height() const override { return height_; }
  int width() const override { return width_; }
  Status Gather(const int64_t* ids, int64_t n, uint8_t* out) const override;
  std::vector<float> mean() const override { return mean_; }
  std::vector<float> stddev() const override { return stddev_; }
  const std::vector<int32_t>& class_labels() const override { return class_labels_; }

 private:
  std::string name_;
  int64_t count_;
  int channels_, height_, width_;
  std::vector<uint8_t> pixels_;
  std::vector<int32_t> class_labels_;
  std::vector<float> mean_, stddev_;
};

struct AugmentOptions {
  bool enabled = true;
  // Random crop: pad each side with `padding` zero pixels, then crop back to the original
  // size at a uniform offset in [0, 2*padding]^2. -1 = by image size: clamp(round(H/10), 2, 4).
  int padding = -1;
  // Flip left-right with probability 1/2.
  bool horizontal_flip = true;
  // Random resized crop (the Inception / SimCLR crop) instead of pad-and-crop when > 0: a
  // window covering a uniform fraction in [crop_min_scale, 1] of the image area, with a
  // log-uniform aspect ratio in [3/4, 4/3] (clipped to the image), at a uniform position,
  // resized bilinearly to the output size. 0 = pad-and-crop. In (0, 1].
  double crop_min_scale = 0;
  uint64_t seed = 0;
  // Which view of the sample the draws are for (two-view batches, BatchLoaderOptions::views):
  // view 0 draws what a one-view run draws, view v > 0 from (seed, round, epoch, id, v).
  int view = 0;
  // Colour jitter and random grayscale (worker/train/colour_augment.h): the probability of
  // jitter and its strengths, the probability of grayscale. 0 = off.
  double color_jitter_prob = 0;
  double jitter_brightness = 0;
  double jitter_contrast = 0;
  double jitter_saturation = 0;
  double jitter_hue = 0;
  double grayscale_prob = 0;
};

// The hash a sample's augmentation draws of kind `tag` come from: (seed, tag, round, epoch,
// id), plus the view when it is > 0.
uint64_t AugmentHash(const AugmentOptions& options, uint64_t tag, int round, int epoch, int64_t id);

int EffectivePadding(const AugmentOptions& options, int image_height);

// Turns uint8 images [n, C, H, W] into the model's float input [n, C, S, S]: augmentation
// (one batched gather for crop + flip; the draws of sample `id` come from (seed, round,
// epoch, id), so they do not depend on the batch, the rank or the world size), scaling to
// [0, 1], per-channel normalisation, and a bilinear resize when S != H or W.
torch::Tensor PrepareImages(const torch::Tensor& pixels, const std::vector<int64_t>& ids,
                            const AugmentOptions& augment, int round, int epoch,
                            const std::vector<float>& mean, const std::vector<float>& stddev,
                            int image_size);

// The crop offsets and flip drawn for one sample (exposed for tests).
struct AugmentDraw {
  int offset_y = 0;  // in [0, 2*padding]; padding = no shift
  int offset_x = 0;
  bool flip = false;
};
AugmentDraw DrawAugmentation(const AugmentOptions& options, int padding, int round, int epoch,
                             int64_t id);

// The window of a random resized crop drawn for one sample, in pixels of the source image
// (exposed for tests): [y0, y0 + height) x [x0, x0 + width), real-valued.
struct ResizedCropDraw {
  double y0 = 0, x0 = 0, height = 0, width = 0;
  bool flip = false;
};
ResizedCropDraw DrawResizedCrop(const AugmentOptions& options, int image_height, int image_width,
                                int round, int epoch, int64_t id);

// One prepared batch of this rank.
struct LoadedBatch {
  int64_t index = 0;  // position in the schedule
  StepPosition position;
  std::vector<int64_t> ids;
  // float [n * views, C, S, S]; with BatchLoaderOptions.images_as_bytes uint8 (the pixel
  // values, worker/train/image_bytes.h).
  torch::Tensor images;
  // Bad samples of this batch (already logged and counted) and the slots that replaced them:
  // apply `replaced` to the batch's labels (ApplyReplacements).
  int64_t bad_samples = 0;
  std::vector<std::pair<int64_t, int64_t>> replaced;
  // The rank's bad samples so far (BadSampleTracker).
  BadSamplesSoFar bad_so_far;
};

struct BatchLoaderOptions {
  const ImageDataset* dataset = nullptr;  // must outlive the loader
  ScheduleOptions schedule;
  AugmentOptions augment;
  int image_size = 28;
  // Batches prepared ahead.
  int queue_depth = 2;
  // Page-lock each batch in the loader's thread (training on CUDA: the step's host-to-device
  // copy is then asynchronous and the pinning costs the training thread nothing).
  bool pin_memory = false;
  // Hand the images over as uint8 (QuantiseImages with the dataset's normalisation), a quarter
  // of the float32 bytes, for a step that normalises them on its device (training on CUDA).
  bool images_as_bytes = false;
  // Augmented views per image (1 or 2). With 2 a batch of n images holds 2n rows, rows 2k and
  // 2k+1 image k's views 0 and 1 (the contrastive losses' layout); `ids`, bad samples and
  // `replaced` stay per image.
  int views = 1;
};

// Prepares the batches of a BatchSchedule in a background thread (single-threaded ATen
// there, so it does not compete with the step's intra-op threads for more than one core;
// encoded datasets decode in their own pool of dataset.loader_threads). Bad samples are
// counted (BadSampleTracker); beyond the dataset's max_bad_fraction Next() returns the
// tracker's error.
class BatchLoader {
 public:
  explicit BatchLoader(const BatchLoaderOptions& options);
  ~BatchLoader();  // stops the thread
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next batch in schedule order; OUT_OF_RANGE after the last one; the loader's error
  // (e.g. a bad id) when preparing failed.
  StatusOr<LoadedBatch> Next();
  // Seconds Next() spent waiting for the background thread (data stalls), in total.
  double wait_seconds() const { return wait_seconds_; }
  int64_t num_batches() const { return num_batches_; }

 private:
  void Run();

  BatchLoaderOptions options_;
  int64_t num_batches_ = 0;
  int64_t next_index_ = 0;
  double wait_seconds_ = 0;
  PrefetchQueue<StatusOr<LoadedBatch>> queue_;
  std::unique_ptr<BadSampleTracker> bad_;
  std::thread thread_;
};

}  // namespace mlcd::worker
