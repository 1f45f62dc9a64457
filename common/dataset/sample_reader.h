// Reads samples' encoded image bytes through a dataset index: one pread of the recorded
// byte range per sample, no scan of a shard. Thread-safe: the decode threads of a loader
// share one reader. The first kMaxOpenShards shards read stay open until destruction; shards
// beyond those, and image-folder files, are opened per read.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/dataset/dataset_index.h"
#include "common/mutex.h"
#include "common/status.h"

namespace mlcd {

// The most shard descriptors a SampleReader keeps open.
constexpr size_t kMaxOpenShards = 256;

class SampleReader {
 public:
  // `index` must outlive the reader.
  explicit SampleReader(const DatasetIndex* index) : index_(index) {}
  ~SampleReader();
  SampleReader(const SampleReader&) = delete;
  SampleReader& operator=(const SampleReader&) = delete;

  // Sample `id`'s bytes into *out (resized). OUT_OF_RANGE for an id outside the index;
  // FAILED_PRECONDITION when its file cannot be opened; DATA_LOSS naming the key and file
  // when the file is shorter than the index says (it changed after indexing).
  Status Read(int64_t id, std::string* out);

 private:
  StatusOr<int> Descriptor(uint32_t file, bool* owned) LOCKS_EXCLUDED(mu_);

  const DatasetIndex* index_;
  Mutex mu_;
  std::unordered_map<uint32_t, int> open_ GUARDED_BY(mu_);  // shard file -> fd
};

}  // namespace mlcd
