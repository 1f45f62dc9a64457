#include "worker/train/dataset.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/blas_env.h"
#include "common/idx.h"
#include "common/log.h"
#include "common/spec_defaults.h"
#include "worker/train/colour_augment.h"
#include "worker/train/image_bytes.h"
#include "worker/train/indexed_dataset.h"

namespace mlcd::worker {
namespace {

// Fashion-MNIST pixel statistics (train split, pixels / 255).
constexpr float kFashionMnistMean = 0.2860f;
constexpr float kFashionMnistStd = 0.3530f;

}  // namespace

InMemoryImageDataset::InMemoryImageDataset(std::string name, int64_t count, int channels,
                                           int height, int width, std::vector<uint8_t> pixels,
                                           std::vector<int32_t> class_labels,
                                           std::vector<float> mean, std::vector<float> stddev)
    : name_(std::move(name)),
      count_(count),
      channels_(channels),
      height_(height),
      width_(width),
      pixels_(std::move(pixels)),
      class_labels_(std::move(class_labels)),
      mean_(std::move(mean)),
      stddev_(std::move(stddev)) {}

std::string InMemoryImageDataset::Describe() const {
  std::ostringstream s;
  s << name_ << " (" << count_ << " images, " << height_ << "x" << width_ << "x" << channels_
    << ")";
  return s.str();
}

Status InMemoryImageDataset::Gather(const int64_t* ids, int64_t n, uint8_t* out) const {
  const size_t image_bytes = static_cast<size_t>(channels_) * height_ * width_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= count_) {
      return Status::InvalidArgument("sample id " + std::to_string(id) + " is outside " +
                                     Describe() + " (ids are 0.." + std::to_string(count_ - 1) +
                                     ")");
    }
    std::memcpy(out + static_cast<size_t>(i) * image_bytes,
                pixels_.data() + static_cast<size_t>(id) * image_bytes, image_bytes);
  }
  return Status::Ok();
}

const DatasetAnnotations& ImageDataset::annotations() const {
  static const DatasetAnnotations* const kNone = new DatasetAnnotations();
  return *kNone;
}

StatusOr<PreparedImages> ImageDataset::Prepare(const std::vector<int64_t>& ids,
                                               const AugmentOptions& augment, int round, int epoch,
                                               int image_size) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  torch::Tensor pixels = torch::empty({n, channels(), height(), width()}, torch::kUInt8);
  MLCD_RETURN_IF_ERROR(Gather(ids.data(), n, pixels.data_ptr<uint8_t>()));
  PreparedImages out;
  out.images = PrepareImages(pixels, ids, augment, round, epoch, mean(), stddev(), image_size);
  return out;
}

void ApplyReplacements(const std::vector<std::pair<int64_t, int64_t>>& replaced,
                       int labels_per_sample, std::vector<int32_t>* labels) {
  const size_t l = static_cast<size_t>(labels_per_sample);
  for (const auto& [slot, source] : replaced) {
    std::copy_n(labels->begin() + static_cast<ptrdiff_t>(source * l), l,
                labels->begin() + static_cast<ptrdiff_t>(slot * l));
  }
}

StatusOr<std::unique_ptr<ImageDataset>> OpenImageDataset(const v1::DatasetSpec& dataset,
                                                         const std::string& split,
                                                         int64_t test_limit,
                                                         const v1::ModelSpec* model) {
  const std::string format = dataset.format().empty() ? "fashion-mnist" : dataset.format();
  if (split != "train" && split != "test") {
    return Status::InvalidArgument("dataset split must be \"train\" or \"test\", got \"" + split +
                                   "\"");
  }
  if (IsIndexedFormat(format)) {
    if (!model) {
      return Status::InvalidArgument("a " + format +
                                     " dataset needs the model's channels and image size");
    }
    return OpenIndexedImageDataset(dataset, split, test_limit, *model);
  }
  if (format != "fashion-mnist") {
    return Status::InvalidArgument("dataset.format \"" + format +
                                   "\" is not supported; known formats: fashion-mnist, "
                                   "image-folder, webdataset");
  }
  const std::string dir = dataset.path().empty() ? kFashionMnistDir : dataset.path();
  std::string images_path, labels_path;
  MLCD_RETURN_IF_ERROR(FindMnistSplit(dir, split, &images_path, &labels_path));
  const int64_t limit = split == "train" ? static_cast<int64_t>(dataset.limit()) : test_limit;
  MLCD_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path, limit));
  MLCD_ASSIGN_OR_RETURN(std::vector<uint8_t> labels, ReadIdxLabels(labels_path, limit));
  if (static_cast<int64_t>(labels.size()) != images.count) {
    return Status::DataLoss(labels_path + " has " + std::to_string(labels.size()) + " labels but " +
                            images_path + " has " + std::to_string(images.count) + " images");
  }
  std::vector<int32_t> classes(labels.begin(), labels.end());
  // The spec's normalisation when it gives one, the dataset's statistics otherwise.
  std::vector<float> mean = {kFashionMnistMean}, stddev = {kFashionMnistStd};
  if (dataset.mean_size() == 1 && dataset.stddev_size() == 1) {
    mean = {static_cast<float>(dataset.mean(0))};
    stddev = {static_cast<float>(dataset.stddev(0))};
  }
  return std::unique_ptr<ImageDataset>(new InMemoryImageDataset(
      "fashion-mnist " + split, images.count, 1, images.rows, images.cols, std::move(images.pixels),
      std::move(classes), std::move(mean), std::move(stddev)));
}

int EffectivePadding(const AugmentOptions& options, int image_height) {
  if (options.padding >= 0) return options.padding;
  return std::clamp(static_cast<int>(std::lround(image_height / 10.0)), 2, 4);
}

uint64_t AugmentHash(const AugmentOptions& options, uint64_t tag, int round, int epoch,
                     int64_t id) {
  if (options.view == 0) {
    return HashValues({options.seed, tag, static_cast<uint64_t>(round),
                       static_cast<uint64_t>(epoch), static_cast<uint64_t>(id)});
  }
  return HashValues({options.seed, tag, static_cast<uint64_t>(round), static_cast<uint64_t>(epoch),
                     static_cast<uint64_t>(id), static_cast<uint64_t>(options.view)});
}

AugmentDraw DrawAugmentation(const AugmentOptions& options, int padding, int round, int epoch,
                             int64_t id) {
  AugmentDraw d;
  d.offset_y = d.offset_x = padding;
  if (!options.enabled) return d;
  const uint64_t h = AugmentHash(options, 0x41554721ull /* "AUG!" */, round, epoch, id);
  const uint64_t span = static_cast<uint64_t>(2 * padding + 1);
  d.offset_y = static_cast<int>((h & 0xFFFF) % span);
  d.offset_x = static_cast<int>(((h >> 16) & 0xFFFF) % span);
  d.flip = options.horizontal_flip && ((h >> 40) & 1);
  return d;
}

ResizedCropDraw DrawResizedCrop(const AugmentOptions& options, int image_height, int image_width,
                                int round, int epoch, int64_t id) {
  ResizedCropDraw d;
  d.height = image_height;
  d.width = image_width;
  if (!options.enabled) return d;
  const uint64_t h = AugmentHash(options, 0x52524321ull /* "RRC!" */, round, epoch, id);
  // Four uniforms in [0, 1) from 15 bits each of the hash (bits 0..59), the flip from bit 63.
  auto uniform = [h](int k) { return static_cast<double>((h >> (15 * k)) & 0x7FFF) / 32768.0; };
  const double scale = options.crop_min_scale + (1.0 - options.crop_min_scale) * uniform(0);
  const double log_ratio =
      std::log(3.0 / 4.0) + (std::log(4.0 / 3.0) - std::log(3.0 / 4.0)) * uniform(1);
  const double area = scale * image_height * image_width;
  const double ratio = std::exp(log_ratio);  // width / height
  d.width = std::min<double>(image_width, std::sqrt(area * ratio));
  d.height = std::min<double>(image_height, std::sqrt(area / ratio));
  d.y0 = (image_height - d.height) * uniform(2);
  d.x0 = (image_width - d.width) * uniform(3);
  d.flip = options.horizontal_flip && ((h >> 63) & 1);
  return d;
}

namespace {

// Random resized crops of float images [n, c, h, w] to [n, c, size, size]: one batched
// affine_grid + grid_sample (bilinear; a sample point within half a pixel of the window's
// edge repeats the border pixel).
torch::Tensor ResizedCrops(const torch::Tensor& images, const std::vector<int64_t>& ids,
                           const AugmentOptions& augment, int round, int epoch, int size) {
  namespace F = torch::nn::functional;
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  // theta maps output coordinates in [-1, 1] to input coordinates in [-1, 1] (align_corners
  // false: -1 and 1 are the outer edges of the border pixels).
  std::vector<float> theta(static_cast<size_t>(n) * 6, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    ResizedCropDraw d = DrawResizedCrop(augment, static_cast<int>(h), static_cast<int>(w), round,
                                        epoch, ids[static_cast<size_t>(i)]);
    float* t = &theta[static_cast<size_t>(i) * 6];
    const double sx = d.width / w, sy = d.height / h;
    t[0] = static_cast<float>(d.flip ? -sx : sx);
    t[2] = static_cast<float>((2 * d.x0 + d.width) / w - 1);
    t[4] = static_cast<float>(sy);
    t[5] = static_cast<float>((2 * d.y0 + d.height) / h - 1);
  }
  torch::Tensor thetas = torch::from_blob(theta.data(), {n, 2, 3}, torch::kFloat).clone();
  torch::Tensor grid = F::affine_grid(thetas, {n, c, size, size}, /*align_corners=*/false);
  return F::grid_sample(images, grid,
                        F::GridSampleFuncOptions()
                            .mode(torch::kBilinear)
                            .padding_mode(torch::kBorder)
                            .align_corners(false));
}

}  // namespace

torch::Tensor PrepareImages(const torch::Tensor& pixels, const std::vector<int64_t>& ids,
                            const AugmentOptions& augment, int round, int epoch,
                            const std::vector<float>& mean, const std::vector<float>& stddev,
                            int image_size) {
  torch::NoGradGuard no_grad;
  const int64_t n = pixels.size(0), c = pixels.size(1), h = pixels.size(2), w = pixels.size(3);
  torch::Tensor x = pixels;
  const bool resized_crop = augment.enabled && augment.crop_min_scale > 0 && n > 0;
  if (augment.enabled && !resized_crop && n > 0) {
    const int pad = EffectivePadding(augment, static_cast<int>(h));
    std::vector<int64_t> oy(static_cast<size_t>(n)), ox(static_cast<size_t>(n));
    std::vector<uint8_t> flip(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      AugmentDraw d = DrawAugmentation(augment, pad, round, epoch, ids[static_cast<size_t>(i)]);
      oy[static_cast<size_t>(i)] = d.offset_y;
      ox[static_cast<size_t>(i)] = d.offset_x;
      flip[static_cast<size_t>(i)] = d.flip ? 1 : 0;
    }
    auto i64 = torch::TensorOptions().dtype(torch::kLong);
    torch::Tensor off_y = torch::from_blob(oy.data(), {n, 1, 1}, i64);
    torch::Tensor off_x = torch::from_blob(ox.data(), {n, 1, 1}, i64);
    torch::Tensor flips = torch::from_blob(flip.data(), {n, 1, 1}, torch::kUInt8).to(torch::kBool);
    const int64_t pw = w + 2 * pad;
    torch::Tensor padded = torch::constant_pad_nd(x, {pad, pad, pad, pad}, 0);
    torch::Tensor ys = torch::arange(h, i64).view({1, h, 1});
    torch::Tensor xs = torch::arange(w, i64).view({1, 1, w});
    torch::Tensor xsel = torch::where(flips, (w - 1) - xs, xs);  // [n, 1, w]
    torch::Tensor index =
        ((ys + off_y) * pw + xsel + off_x).view({n, 1, h * w}).expand({n, c, h * w});
    x = padded.reshape({n, c, -1}).gather(2, index).view({n, c, h, w});
  }
  // (v / 255 - mean) / std as v * scale + shift, the float operations of the decode pool's
  // transform (worker/data/image_transform.h), so both give the same bits for one pixel.
  std::vector<float> scale(mean.size()), shift(mean.size());
  for (size_t i = 0; i < mean.size(); ++i) {
    scale[i] = 1.0f / (255.0f * stddev[i]);
    shift[i] = -mean[i] / stddev[i];
  }
  torch::Tensor out = x.to(torch::kFloat);
  out.mul_(torch::tensor(scale).view({1, -1, 1, 1})).add_(torch::tensor(shift).view({1, -1, 1, 1}));
  if (resized_crop) {
    // The crop resizes straight to the model's size.
    out = ResizedCrops(out, ids, augment, round, epoch, image_size);
  } else if (image_size != h || image_size != w) {
    namespace F = torch::nn::functional;
    out = F::interpolate(out, F::InterpolateFuncOptions()
                                  .size(std::vector<int64_t>{image_size, image_size})
                                  .mode(torch::kBilinear)
                                  .align_corners(false));
  }
  return out.contiguous();
}

BatchLoader::BatchLoader(const BatchLoaderOptions& options)
    : options_(options), queue_(options.queue_depth) {
  num_batches_ = BatchSchedule(options_.schedule).num_batches();
  bad_ = std::make_unique<BadSampleTracker>(options_.dataset->max_bad_fraction(),
                                            options_.dataset->size(), options_.dataset->Describe());
  thread_ = std::thread([this] { Run(); });
}

BatchLoader::~BatchLoader() {
  queue_.Stop();
  if (thread_.joinable()) thread_.join();
}

namespace {

// One batch of the schedule: its images (bad samples replaced, counted by `bad`).
StatusOr<LoadedBatch> LoadBatch(const BatchLoaderOptions& options, BatchSchedule& schedule,
                                int64_t index, BadSampleTracker* bad) {
  LoadedBatch batch;
  batch.index = index;
  batch.position = schedule.Position(index);
  schedule.LocalIds(index, &batch.ids);
  try {
    // Each view is prepared with its own draws; a sample bad in one is bad in every view (the
    // same bytes), so the first view's bad samples and replacements stand for all.
    std::vector<torch::Tensor> views;
    for (int view = 0; view < options.views; ++view) {
      AugmentOptions augment = options.augment;
      augment.view = view;
      const StepPosition& pos = batch.position;
      MLCD_ASSIGN_OR_RETURN(
          PreparedImages prepared,
          options.dataset->Prepare(batch.ids, augment, pos.round, pos.epoch, options.image_size));
      if (ColourAugmentationOn(augment)) {
        ApplyColourAugmentation(prepared.images, batch.ids, augment, pos.round, pos.epoch,
                                options.dataset->mean(), options.dataset->stddev());
      }
      views.push_back(std::move(prepared.images));
      if (view > 0) continue;
      for (const BadSample& b : prepared.bad) MLCD_RETURN_IF_ERROR(bad->Record(b));
      batch.bad_samples = static_cast<int64_t>(prepared.bad.size());
      batch.replaced = std::move(prepared.replaced);
    }
    // Interleaved: row 2k and 2k + 1 are image k's two views.
    batch.images = views.size() == 1 ? std::move(views[0]) : torch::stack(views, 1).flatten(0, 1);
    if (options.images_as_bytes) {
      batch.images = QuantiseImages(
          batch.images, PixelNormalisation{options.dataset->mean(), options.dataset->stddev()});
    }
    if (options.pin_memory) batch.images = batch.images.pin_memory();
    batch.bad_so_far = bad->so_far();
  } catch (const std::exception& e) {
    return Status::Internal(std::string("preparing batch images failed: ") + e.what());
  }
  return batch;
}

}  // namespace

void BatchLoader::Run() {
  // ATen ops of the loader thread run on this thread alone (its own OpenMP ICV).
  ScopedOmpThreads one_intra_op_thread(1);
  BatchSchedule schedule(options_.schedule);
  for (int64_t index = 0; index < num_batches_; ++index) {
    if (!queue_.WaitForRoom()) return;
    StatusOr<LoadedBatch> item = LoadBatch(options_, schedule, index, bad_.get());
    const bool failed = !item.ok();
    queue_.Push(std::move(item));
    if (failed) return;
  }
}

StatusOr<LoadedBatch> BatchLoader::Next() {
  if (next_index_ >= num_batches_) return Status::OutOfRange("no more batches in this schedule");
  double waited = 0;
  StatusOr<LoadedBatch> item = queue_.Pop(&waited);
  wait_seconds_ += waited;
  if (item.ok()) ++next_index_;
  return item;
}

}  // namespace mlcd::worker
