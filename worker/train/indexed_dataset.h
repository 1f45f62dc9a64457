// Image-folder and WebDataset datasets in the worker (docs/data.md): sample i's encoded bytes
// are read with one pread through the dataset index (common/dataset/), then decoded and
// transformed by a pool of dataset.loader_threads decode threads (worker/data/decode_pool.h)
// straight into the batch tensor: RandomResizedCrop + flip (training) or resize + centre crop
// (evaluation, extraction, and training with augmentation off), normalised with the spec's
// mean / stddev (CLIP's by default). A sample that cannot be read or decoded takes the image
// of the next good sample of its batch and is reported (PreparedImages::bad); the batch
// loader counts it against dataset.max_bad_fraction (worker/train/bad_samples.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/dataset/dataset_index.h"
#include "common/dataset/sample_reader.h"
#include "common/mutex.h"
#include "worker/data/decode_pool.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {

// Opens `split` of an image-folder / webdataset dataset: dataset.index for "train",
// dataset.test_index for "test", fingerprint checked; the first `limit` samples when > 0
// (dataset.limit for train, test_limit for test). Images come out with model.channels
// channels at model.image_size.
StatusOr<std::unique_ptr<ImageDataset>> OpenIndexedImageDataset(const v1::DatasetSpec& dataset,
                                                                const std::string& split,
                                                                int64_t test_limit,
                                                                const v1::ModelSpec& model);

class IndexedImageDataset : public ImageDataset {
 public:
  // `transform` holds everything but the seed (taken from the AugmentOptions of Prepare);
  // the loader threads share `memory_budget` (dataset.decode_memory_mb; null = no bound).
  IndexedImageDataset(std::string name, std::unique_ptr<DatasetIndex> index, int64_t size,
                      const TransformParams& transform, int loader_threads, double max_bad_fraction,
                      std::shared_ptr<DecodeMemoryBudget> memory_budget = nullptr);
  ~IndexedImageDataset() override;

  std::string Describe() const override;
  int64_t size() const override { return size_; }
  int channels() const override { return transform_.channels; }
  int height() const override { return transform_.image_size; }
  int width() const override { return transform_.image_size; }
  // Encoded images have no fixed pixel size: FAILED_PRECONDITION (use Prepare).
  Status Gather(const int64_t* ids, int64_t n, uint8_t* out) const override;
  std::vector<float> mean() const override { return EffectiveMean(transform_); }
  std::vector<float> stddev() const override { return EffectiveStd(transform_); }
  const std::vector<int32_t>& class_labels() const override { return class_labels_; }
  const DatasetAnnotations& annotations() const override { return annotations_; }
  // `image_size` must be the dataset's (model.image_size); DecodePool does the rest.
  StatusOr<PreparedImages> Prepare(const std::vector<int64_t>& ids, const AugmentOptions& augment,
                                   int round, int epoch, int image_size) const override;
  double max_bad_fraction() const override { return max_bad_fraction_; }
  std::string key(int64_t id) const override;

 private:
  StatusOr<DecodePool*> Pool(TransformMode mode, uint64_t seed) const REQUIRES(mu_);

  std::string name_;
  std::unique_ptr<DatasetIndex> index_;
  int64_t size_;
  TransformParams transform_;
  int loader_threads_;
  double max_bad_fraction_;
  std::shared_ptr<DecodeMemoryBudget> memory_budget_;
  std::vector<int32_t> class_labels_;
  DatasetAnnotations annotations_;  // the index's, cut to size_ samples
  std::unique_ptr<SampleReader> reader_;
  // Held by Prepare for a whole batch: one batch at a time goes through the pool.
  mutable Mutex mu_;
  mutable std::unique_ptr<DecodePool> pool_ GUARDED_BY(mu_);
  mutable TransformMode pool_mode_ GUARDED_BY(mu_) = TransformMode::kTrain;
  mutable uint64_t pool_seed_ GUARDED_BY(mu_) = 0;
};

}  // namespace mlcd::worker
