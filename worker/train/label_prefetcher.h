// Background prefetch of each batch's labels from mlcd-labelstore.
//
// The sample order is deterministic (worker/train/sample_order.h), so the prefetcher knows the ids
// of every future batch of this rank: a background thread reads them with GetLabels through
// the label-store client and keeps up to `depth` batches ready. The training step only waits
// when the label store is slower than the step; that wait (the "label stall") is measured per
// batch and in total, and exported as mlcd_worker_label_wait_seconds.
//
// Errors, returned by Next() in batch order:
//   NOT_FOUND / UNAVAILABLE / ... from the label store, after retrying transient failures
//     (UNAVAILABLE, DEADLINE_EXCEEDED) for `retry_timeout`;
//   FAILED_PRECONDITION naming the label set and the sample id when the set has no labels for
//     a sample of the batch (the set does not cover the dataset the job trains on);
//   INVALID_ARGUMENT when rows have a different width than the expected l.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clients/labelstore_client.h"
#include "common/prefetch_queue.h"
#include "common/status.h"
#include "worker/train/sample_order.h"

namespace mlcd::worker {

struct LabelPrefetcherOptions {
  // Must outlive the prefetcher.
  const labelstore::LabelStoreClient* client = nullptr;
  std::string label_set;
  // l: every row must have this many labels.
  int labels_per_sample = 0;
  // The batches to fetch, in order (the same schedule as the data loader's).
  ScheduleOptions schedule;
  // Batches kept ready ahead of the consumer (>= 1).
  int depth = 4;
  // How long transient label-store failures are retried before Next() reports them.
  std::chrono::milliseconds retry_timeout{30000};
};

// The labels of one batch: row i belongs to ids[i].
struct BatchLabels {
  int64_t index = 0;
  std::vector<int64_t> ids;
  std::vector<int32_t> labels;  // ids.size() x labels_per_sample, row-major
  int labels_per_sample = 0;
  double fetch_seconds = 0;  // time the GetLabels call(s) took in the background
};

class LabelPrefetcher {
 public:
  explicit LabelPrefetcher(const LabelPrefetcherOptions& options);
  ~LabelPrefetcher();  // stops the thread (an in-flight read finishes or times out first)
  LabelPrefetcher(const LabelPrefetcher&) = delete;
  LabelPrefetcher& operator=(const LabelPrefetcher&) = delete;

  // The next batch's labels (blocks until fetched); OUT_OF_RANGE after the last batch.
  StatusOr<BatchLabels> Next();

  // Seconds the last Next() blocked, and all of them together.
  double last_wait_seconds() const { return last_wait_seconds_; }
  double total_wait_seconds() const { return total_wait_seconds_; }
  int64_t num_batches() const { return num_batches_; }

 private:
  void Run();
  Status Fetch(const std::vector<int64_t>& ids, labelstore::LabelBatch* batch);

  LabelPrefetcherOptions options_;
  int64_t num_batches_ = 0;
  int64_t next_index_ = 0;
  double last_wait_seconds_ = 0;
  double total_wait_seconds_ = 0;
  PrefetchQueue<StatusOr<BatchLabels>> queue_;
  std::thread thread_;
};

}  // namespace mlcd::worker
