#include "worker/train/indexed_dataset.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/enums.h"
#include "common/log.h"

namespace mlcd::worker {

StatusOr<std::unique_ptr<ImageDataset>> OpenIndexedImageDataset(const v1::DatasetSpec& dataset,
                                                                const std::string& split,
                                                                int64_t test_limit,
                                                                const v1::ModelSpec& model) {
  const bool train = split == "train";
  const std::string& dir = train ? dataset.index() : dataset.test_index();
  const std::string field = train ? "dataset.index" : "dataset.test_index";
  if (dir.empty()) {
    return Status::InvalidArgument(field + " is empty; " + dataset.format() +
                                   " datasets are read through an index (mlcdctl dataset index)");
  }
  StatusOr<DatasetIndex> loaded = LoadDatasetIndex(dir, /*check_fingerprint=*/true);
  if (!loaded.ok()) return loaded.status().WithContext(field);
  auto index = std::make_unique<DatasetIndex>(std::move(loaded).value());
  if (DatasetFormatName(index->format) != dataset.format()) {
    return Status::InvalidArgument(field + " '" + dir + "' indexes a " +
                                   DatasetFormatName(index->format) + " dataset, not " +
                                   dataset.format());
  }
  const int64_t limit = train ? static_cast<int64_t>(dataset.limit()) : test_limit;
  const int64_t size = limit > 0 ? std::min(limit, index->size()) : index->size();
  TransformParams t;
  t.image_size = model.image_size();
  t.channels = model.channels();
  t.resize_size = dataset.resize_size();
  if (dataset.crop_min_scale() > 0) t.min_scale = dataset.crop_min_scale();
  if (dataset.crop_max_scale() > 0) t.max_scale = dataset.crop_max_scale();
  if (dataset.crop_min_ratio() > 0) t.min_ratio = dataset.crop_min_ratio();
  if (dataset.crop_max_ratio() > 0) t.max_ratio = dataset.crop_max_ratio();
  if (dataset.has_horizontal_flip() && !dataset.horizontal_flip()) t.flip_probability = 0;
  t.mean.assign(dataset.mean().begin(), dataset.mean().end());
  t.stddev.assign(dataset.stddev().begin(), dataset.stddev().end());
  MLCD_RETURN_IF_ERROR(ValidateTransformParams(t).WithContext(field));
  const int threads = dataset.loader_threads() > 0 ? dataset.loader_threads() : 2;
  const double max_bad = dataset.has_max_bad_fraction() ? dataset.max_bad_fraction() : 0.001;
  StatusOr<DecodeBudgetChoice> chosen =
      ChooseProcessDecodeMemoryBudget(dataset.decode_memory_mb(), threads);
  if (!chosen.ok()) return chosen.status().WithContext(field);
  // The budget used, in the log of every child that decodes: a lowered one is a warning.
  const std::string used = field + ": " + std::to_string(threads) + " loader threads share " +
                           std::to_string(chosen->mb) + " MiB of decode memory (" + chosen->source +
                           ")";
  if (chosen->lowered) {
    MLCD_LOG(WARNING) << used << "; the spec cannot raise the worker's bounds";
  } else {
    MLCD_LOG(INFO) << used;
  }
  auto budget = SharedDecodeMemoryBudget(static_cast<uint64_t>(chosen->mb) << 20);
  return std::unique_ptr<ImageDataset>(
      new IndexedImageDataset(dataset.format() + " " + split + " " + dir, std::move(index), size, t,
                              threads, max_bad, std::move(budget)));
}

IndexedImageDataset::IndexedImageDataset(std::string name, std::unique_ptr<DatasetIndex> index,
                                         int64_t size, const TransformParams& transform,
                                         int loader_threads, double max_bad_fraction,
                                         std::shared_ptr<DecodeMemoryBudget> memory_budget)
    : name_(std::move(name)),
      index_(std::move(index)),
      size_(size),
      transform_(transform),
      loader_threads_(loader_threads),
      max_bad_fraction_(max_bad_fraction),
      memory_budget_(std::move(memory_budget)) {
  reader_ = std::make_unique<SampleReader>(index_.get());
  bool all_classes = !index_->classes.empty();
  for (int64_t i = 0; i < size_ && all_classes; ++i) all_classes = index_->samples[i].class_id >= 0;
  if (all_classes) {
    class_labels_.resize(static_cast<size_t>(size_));
    for (int64_t i = 0; i < size_; ++i) class_labels_[i] = index_->samples[i].class_id;
  }
}

IndexedImageDataset::~IndexedImageDataset() {
  // The pool's threads read through reader_: stop them first.
  pool_.reset();
}

std::string IndexedImageDataset::Describe() const {
  std::ostringstream s;
  s << name_ << " (" << size_ << " images, decoded to " << transform_.image_size << "x"
    << transform_.image_size << "x" << transform_.channels << ")";
  return s.str();
}

std::string IndexedImageDataset::key(int64_t id) const {
  if (id < 0 || id >= size_) return std::to_string(id);
  return index_->keys[static_cast<size_t>(id)];
}

Status IndexedImageDataset::Gather(const int64_t*, int64_t, uint8_t*) const {
  return Status::FailedPrecondition(Describe() +
                                    " holds encoded images of any size; use Prepare()");
}

StatusOr<DecodePool*> IndexedImageDataset::Pool(TransformMode mode, uint64_t seed) const {
  if (pool_ && pool_mode_ == mode && pool_seed_ == seed) return pool_.get();
  pool_.reset();
  DecodePoolOptions o;
  o.threads = loader_threads_;
  o.transform = transform_;
  o.transform.seed = seed;
  o.mode = mode;
  o.memory_budget = memory_budget_;
  MLCD_ASSIGN_OR_RETURN(pool_, DecodePool::Create(o));
  pool_mode_ = mode;
  pool_seed_ = seed;
  return pool_.get();
}

StatusOr<PreparedImages> IndexedImageDataset::Prepare(const std::vector<int64_t>& ids,
                                                      const AugmentOptions& augment, int round,
                                                      int epoch, int image_size) const {
  if (image_size != transform_.image_size) {
    return Status::InvalidArgument(Describe() + " decodes to " +
                                   std::to_string(transform_.image_size) + " pixels, not " +
                                   std::to_string(image_size));
  }
  MutexLock lock(&mu_);
  MLCD_ASSIGN_OR_RETURN(
      DecodePool * pool,
      Pool(augment.enabled ? TransformMode::kTrain : TransformMode::kEval, augment.seed));
  const int64_t n = static_cast<int64_t>(ids.size());
  const size_t per = static_cast<size_t>(transform_.channels) * image_size * image_size;
  PreparedImages out;
  out.images = torch::empty({n, transform_.channels, image_size, image_size}, torch::kFloat);
  float* dst = out.images.data_ptr<float>();
  std::vector<bool> good(static_cast<size_t>(n), true);
  std::vector<int64_t> bad_slots;
  int64_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    while (next < n && (next == i || pool->room() > 0)) {
      const int64_t id = ids[static_cast<size_t>(next)];
      if (id < 0 || id >= size_) {
        return Status::InvalidArgument("sample id " + std::to_string(id) + " is outside " +
                                       Describe());
      }
      DecodeJob job;
      job.key = SampleKey{round, epoch, id, augment.view};
      job.fetch = [this, id]() -> StatusOr<std::string> {
        std::string bytes;
        MLCD_RETURN_IF_ERROR(reader_->Read(id, &bytes));
        return bytes;
      };
      job.destination = dst + static_cast<size_t>(next) * per;
      if (!pool->Submit(std::move(job))) return Status::Cancelled("decode pool stopped");
      ++next;
    }
    DecodedSample s = pool->Next();
    if (s.status.code() == StatusCode::kCancelled) return s.status;
    if (!s.status.ok()) {
      good[static_cast<size_t>(i)] = false;
      bad_slots.push_back(i);
      out.bad.push_back({ids[static_cast<size_t>(i)], key(ids[static_cast<size_t>(i)]), s.status});
    }
  }
  for (size_t j = 0; j < bad_slots.size(); ++j) {
    const int64_t slot = bad_slots[j];
    const BadSample& b = out.bad[j];
    int64_t source = -1;
    for (int64_t k = 1; k < n && source < 0; ++k) {
      if (good[static_cast<size_t>((slot + k) % n)]) source = (slot + k) % n;
    }
    if (source < 0) {
      return Status::DataLoss("every sample of a batch of " + std::to_string(n) + " from " +
                              Describe() + " is bad, e.g. '" + b.key + "': " + b.status.ToString());
    }
    std::memcpy(dst + static_cast<size_t>(slot) * per, dst + static_cast<size_t>(source) * per,
                per * sizeof(float));
    out.replaced.emplace_back(slot, source);
  }
  return out;
}

}  // namespace mlcd::worker
