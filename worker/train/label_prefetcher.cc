#include "worker/train/label_prefetcher.h"

#include <algorithm>

#include "common/log.h"

namespace mlcd::worker {

LabelPrefetcher::LabelPrefetcher(const LabelPrefetcherOptions& options)
    : options_(options), queue_(options.depth) {
  options_.depth = std::max(1, options_.depth);
  num_batches_ = BatchSchedule(options_.schedule).num_batches();
  thread_ = std::thread([this] { Run(); });
}

LabelPrefetcher::~LabelPrefetcher() {
  queue_.Stop();
  if (thread_.joinable()) thread_.join();
}

Status LabelPrefetcher::Fetch(const std::vector<int64_t>& ids, labelstore::LabelBatch* batch) {
  const auto deadline = std::chrono::steady_clock::now() + options_.retry_timeout;
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    Status st =
        options_.client->GetLabels(options_.label_set, ids.data(), ids.size(), false, batch);
    const bool transient =
        st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded;
    if (st.ok() || !transient || std::chrono::steady_clock::now() + backoff > deadline) {
      if (!st.ok())
        return st.WithContext("reading labels of label set '" + options_.label_set + "'");
      return st;
    }
    MLCD_LOG(WARNING) << "label store read failed (" << st.ToString() << "); retrying in "
                      << backoff.count() << " ms";
    if (queue_.SleepUnlessStopped(backoff)) return Status::Cancelled("prefetcher stopped");
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

void LabelPrefetcher::Run() {
  BatchSchedule schedule(options_.schedule);
  labelstore::LabelBatch rows;
  for (int64_t index = 0; index < num_batches_; ++index) {
    if (!queue_.WaitForRoom()) return;
    BatchLabels out;
    out.index = index;
    schedule.LocalIds(index, &out.ids);
    const auto start = std::chrono::steady_clock::now();
    Status st = Fetch(out.ids, &rows);
    out.fetch_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (st.ok() && !rows.missing_ids.empty()) {
      std::string more = rows.missing_ids.size() > 1
                             ? " (and " + std::to_string(rows.missing_ids.size() - 1) +
                                   " more samples of this batch)"
                             : "";
      st = Status::FailedPrecondition(
          "label set '" + options_.label_set + "' has no labels for sample id " +
          std::to_string(rows.missing_ids.front()) + more +
          "; the set must hold a row for every training sample id 0..N-1 of the "
          "dataset (was it written for a different dataset or limit?)");
    }
    if (st.ok() && rows.labels_per_sample != options_.labels_per_sample) {
      st = Status::InvalidArgument("label set '" + options_.label_set + "' has " +
                                   std::to_string(rows.labels_per_sample) +
                                   " labels per sample, the job expects " +
                                   std::to_string(options_.labels_per_sample) + " (clustering.l)");
    }
    if (st.ok()) {
      out.labels_per_sample = rows.labels_per_sample;
      out.labels = rows.labels;
    }
    StatusOr<BatchLabels> item =
        st.ok() ? StatusOr<BatchLabels>(std::move(out)) : StatusOr<BatchLabels>(st);
    const bool failed = !st.ok();
    queue_.Push(std::move(item));
    if (failed) return;
  }
}

StatusOr<BatchLabels> LabelPrefetcher::Next() {
  if (next_index_ >= num_batches_) return Status::OutOfRange("no more batches in this schedule");
  StatusOr<BatchLabels> item = queue_.Pop(&last_wait_seconds_);
  total_wait_seconds_ += last_wait_seconds_;
  if (item.ok()) ++next_index_;
  return item;
}

}  // namespace mlcd::worker
