#include "worker/dataset.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/idx.h"
#include "common/log.h"

namespace mlcd::worker {
namespace {

// Fashion-MNIST pixel statistics (train split, pixels / 255).
constexpr float kFashionMnistMean = 0.2860f;
constexpr float kFashionMnistStd = 0.3530f;

// Limits ATen's OpenMP parallelism of the calling thread only (omp_set_num_threads acts on
// the calling thread's ICV). libgomp is loaded with libtorch; looked up at run time so the
// worker need not link OpenMP itself.
void LimitThisThreadToOneIntraOpThread() {
  using SetThreads = void (*)(int);
  static SetThreads fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (fn) fn(1);
}

}  // namespace

InMemoryImageDataset::InMemoryImageDataset(std::string name, int64_t count, int channels, int height, int width,
                                           std::vector<uint8_t> pixels, std::vector<int32_t> class_labels,
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
  s << name_ << " (" << count_ << " images, " << height_ << "x" << width_ << "x" << channels_ << ")";
  return s.str();
}

Status InMemoryImageDataset::Gather(const int64_t* ids, int64_t n, uint8_t* out) const {
  const size_t image_bytes = static_cast<size_t>(channels_) * height_ * width_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= count_) {
      return Status::InvalidArgument("sample id " + std::to_string(id) + " is outside " + Describe() +
                                     " (ids are 0.." + std::to_string(count_ - 1) + ")");
    }
    std::memcpy(out + static_cast<size_t>(i) * image_bytes, pixels_.data() + static_cast<size_t>(id) * image_bytes,
                image_bytes);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<ImageDataset>> OpenImageDataset(const v1::DatasetSpec& dataset, const std::string& split,
                                                         int64_t test_limit) {
  const std::string format = dataset.format().empty() ? "fashion-mnist" : dataset.format();
  if (format != "fashion-mnist") {
    return Status::InvalidArgument("dataset.format \"" + format + "\" is not supported; known formats: fashion-mnist");
  }
  if (split != "train" && split != "test") {
    return Status::InvalidArgument("dataset split must be \"train\" or \"test\", got \"" + split + "\"");
  }
  const std::string dir = dataset.path().empty() ? kFashionMnistDir : dataset.path();
  std::string images_path, labels_path;
  MLCD_RETURN_IF_ERROR(FindMnistSplit(dir, split, &images_path, &labels_path));
  const int64_t limit = split == "train" ? static_cast<int64_t>(dataset.limit()) : test_limit;
  MLCD_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(images_path, limit));
  MLCD_ASSIGN_OR_RETURN(std::vector<uint8_t> labels, ReadIdxLabels(labels_path, limit));
  if (static_cast<int64_t>(labels.size()) != images.count) {
    return Status::DataLoss(labels_path + " has " + std::to_string(labels.size()) + " labels but " + images_path +
                            " has " + std::to_string(images.count) + " images");
  }
  std::vector<int32_t> classes(labels.begin(), labels.end());
  return std::unique_ptr<ImageDataset>(new InMemoryImageDataset(
      "fashion-mnist " + split, images.count, 1, images.rows, images.cols, std::move(images.pixels),
      std::move(classes), {kFashionMnistMean}, {kFashionMnistStd}));
}

int EffectivePadding(const AugmentOptions& options, int image_height) {
  if (options.padding >= 0) return options.padding;
  return std::clamp(static_cast<int>(std::lround(image_height / 10.0)), 2, 4);
}

AugmentDraw DrawAugmentation(const AugmentOptions& options, int padding, int round, int epoch, int64_t id) {
  AugmentDraw d;
  d.offset_y = d.offset_x = padding;
  if (!options.enabled) return d;
  const uint64_t h = HashValues({options.seed, 0x41554721ull /* "AUG!" */, static_cast<uint64_t>(round),
                                 static_cast<uint64_t>(epoch), static_cast<uint64_t>(id)});
  const uint64_t span = static_cast<uint64_t>(2 * padding + 1);
  d.offset_y = static_cast<int>((h & 0xFFFF) % span);
  d.offset_x = static_cast<int>(((h >> 16) & 0xFFFF) % span);
  d.flip = options.horizontal_flip && ((h >> 40) & 1);
  return d;
}

torch::Tensor PrepareImages(const torch::Tensor& pixels, const std::vector<int64_t>& ids, const AugmentOptions& augment,
                            int round, int epoch, const std::vector<float>& mean, const std::vector<float>& stddev,
                            int image_size) {
  torch::NoGradGuard no_grad;
  const int64_t n = pixels.size(0), c = pixels.size(1), h = pixels.size(2), w = pixels.size(3);
  torch::Tensor x = pixels;
  if (augment.enabled && n > 0) {
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
    torch::Tensor index = ((ys + off_y) * pw + xsel + off_x).view({n, 1, h * w}).expand({n, c, h * w});
    x = padded.reshape({n, c, -1}).gather(2, index).view({n, c, h, w});
  }
  torch::Tensor out = x.to(torch::kFloat).mul_(1.0f / 255.0f);
  torch::Tensor m = torch::tensor(mean).view({1, -1, 1, 1});
  torch::Tensor s = torch::tensor(stddev).view({1, -1, 1, 1});
  out.sub_(m).div_(s);
  if (image_size != h || image_size != w) {
    namespace F = torch::nn::functional;
    out = F::interpolate(out, F::InterpolateFuncOptions()
                                  .size(std::vector<int64_t>{image_size, image_size})
                                  .mode(torch::kBilinear)
                                  .align_corners(false));
  }
  return out.contiguous();
}

BatchLoader::BatchLoader(const BatchLoaderOptions& options) : options_(options), queue_(options.queue_depth) {
  num_batches_ = BatchSchedule(options_.schedule).num_batches();
  thread_ = std::thread([this] { Run(); });
}

BatchLoader::~BatchLoader() {
  queue_.Stop();
  if (thread_.joinable()) thread_.join();
}

void BatchLoader::Run() {
  LimitThisThreadToOneIntraOpThread();
  BatchSchedule schedule(options_.schedule);
  const ImageDataset& ds = *options_.dataset;
  for (int64_t index = 0; index < num_batches_; ++index) {
    if (!queue_.WaitForRoom()) return;
    LoadedBatch batch;
    batch.index = index;
    batch.position = schedule.Position(index);
    schedule.LocalIds(index, &batch.ids);
    const int64_t n = static_cast<int64_t>(batch.ids.size());
    torch::Tensor pixels = torch::empty({n, ds.channels(), ds.height(), ds.width()}, torch::kUInt8);
    Status st = ds.Gather(batch.ids.data(), n, pixels.data_ptr<uint8_t>());
    StatusOr<LoadedBatch> item = st.ok() ? StatusOr<LoadedBatch>(std::move(batch)) : StatusOr<LoadedBatch>(st);
    if (st.ok()) {
      try {
        item->images = PrepareImages(pixels, item->ids, options_.augment, item->position.round, item->position.epoch,
                                     ds.mean(), ds.stddev(), options_.image_size);
      } catch (const std::exception& e) {
        item = Status::Internal(std::string("preparing batch images failed: ") + e.what());
      }
    }
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
