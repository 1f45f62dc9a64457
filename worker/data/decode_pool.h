// A pool of decode threads: jobs (a sample's encoded bytes, or a callback that reads them) go
// in in order, finished float CHW images come out in the SAME order (a reorder buffer), with
// at most `max_in_flight` jobs submitted and not yet taken. A bad sample (truncated, corrupt,
// empty, unsupported, unreadable) comes out as a DecodedSample with an error status in its
// place; nothing is thrown and the pool keeps going: the caller counts, logs and skips it.
//
// The augmentation draws depend only on (transform.seed, key.round, key.epoch, key.id), so
// results are the same whatever the number of threads or the timing.
//
// Feeding the worker's bounded prefetch queue (common/prefetch_queue.h) from one loader
// thread, which both submits and takes (room() > 0 guarantees Submit does not block):
//
//   MLCD_ASSIGN_OR_RETURN(auto pool, DecodePool::Create(options));
//   size_t next = 0;                                  // next id of the schedule to submit
//   for (const Batch& batch : schedule) {
//     float* out = batch_tensor.data_ptr<float>();    // [B, C, S, S]
//     int filled = 0;
//     for (int i = 0; i < B; ++i) {
//       while (next < ids.size() && pool->room() > 0) pool->Submit(JobFor(ids[next++]));
//       DecodedSample s = pool->Next();                // sample ids[i] of this batch
//       if (!s.status.ok()) { CountBad(s); continue; }  // the batch comes out one short
//       std::copy(s.pixels.begin(), s.pixels.end(), out + filled++ * C * S * S);
//     }
//     queue.Push(...);
//   }
//
// where JobFor(id) returns a DecodeJob with key = {round, epoch, id} and
// fetch = [=] { return ReadSampleBytes(id); } (the read runs on a pool thread, so tar-shard
// reads overlap with decoding too). Instead of the copy, a job may name a `destination` the
// pool writes into directly (then a bad sample leaves its slot untouched).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "worker/data/image_transform.h"

namespace mlcd::worker {

// The most decode threads one pool runs.
constexpr int kMaxDecodeThreads = 256;

struct DecodeJob {
  // Whose draws to use; key.id is the sample id reported back.
  SampleKey key;
  // The encoded image. When empty, `fetch` is called on a pool thread to get it.
  std::string bytes;
  std::function<StatusOr<std::string>()> fetch;
  // Optional: channels * S * S floats the pool writes the image into (must stay valid until
  // Next() returns this job). Null: the pool allocates DecodedSample::pixels.
  float* destination = nullptr;
};

struct DecodedSample {
  int64_t sample_id = 0;
  // Not OK: the sample is bad (the status says why); pixels are empty and the job's
  // destination is untouched.
  Status status;
  std::vector<float> pixels;  // [C, S, S]; empty when the job had a destination
  double fetch_seconds = 0;
  TransformTimings timings;
};

struct DecodePoolOptions {
  // Decode threads (dataset.loader_threads), in [1, kMaxDecodeThreads].
  int threads = 2;
  // Jobs submitted and not yet taken by Next(), at most. 0 = 4 * threads.
  int max_in_flight = 0;
  TransformParams transform;
  TransformMode mode = TransformMode::kTrain;
  // The decode memory the threads share (decode_budget.h), possibly with other pools of the
  // same worker. Null: no bound.
  std::shared_ptr<DecodeMemoryBudget> memory_budget;
};

class DecodePool {
 public:
  // INVALID_ARGUMENT for options out of range (ValidateTransformParams included).
  static StatusOr<std::unique_ptr<DecodePool>> Create(const DecodePoolOptions& options);
  // Stops and joins the threads; jobs not taken are dropped.
  ~DecodePool();
  DecodePool(const DecodePool&) = delete;
  DecodePool& operator=(const DecodePool&) = delete;

  // Queues a job behind the ones before it. Blocks while max_in_flight jobs are pending;
  // false (job dropped) once Close() or Stop() was called.
  bool Submit(DecodeJob job);
  // How many Submit calls would not block now.
  int room() const;
  // Jobs submitted and not yet taken.
  int pending() const;
  // The oldest job's result, waiting for it (and, when nothing is pending, for a Submit from
  // another thread). A sample with OUT_OF_RANGE status once Close()d and drained, CANCELLED
  // after Stop().
  DecodedSample Next();
  // No more jobs: Submit returns false from now on, Next() drains what is pending.
  void Close();
  // Releases every waiting call; threads finish their current sample and exit.
  void Stop();

  const DecodePoolOptions& options() const { return options_; }

 private:
  explicit DecodePool(const DecodePoolOptions& options);
  void Run() LOCKS_EXCLUDED(mu_);
  DecodedSample Process(DecodeJob& job) const;

  struct Slot {
    DecodeJob job;
    bool started = false;
    bool done = false;
    DecodedSample result;
  };

  DecodePoolOptions options_;
  size_t output_floats_ = 0;
  mutable Mutex mu_;
  std::condition_variable work_cv_, done_cv_, room_cv_;
  std::deque<Slot> slots_ GUARDED_BY(mu_);  // slots_[0] is the oldest job not taken
  size_t next_start_ GUARDED_BY(mu_) = 0;   // index into slots_ of the first job not started
  bool closed_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace mlcd::worker
