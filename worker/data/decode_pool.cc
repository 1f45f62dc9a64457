#include "worker/data/decode_pool.h"

#include <chrono>
#include <exception>

namespace mlcd::worker {

StatusOr<std::unique_ptr<DecodePool>> DecodePool::Create(const DecodePoolOptions& options) {
  if (options.threads < 1 || options.threads > kMaxDecodeThreads)
    return Status::InvalidArgument("decode pool: threads is " + std::to_string(options.threads) +
                                   "; it must be in [1, " + std::to_string(kMaxDecodeThreads) +
                                   "]");
  if (options.max_in_flight < 0)
    return Status::InvalidArgument("decode pool: max_in_flight is " +
                                   std::to_string(options.max_in_flight) +
                                   "; use 0 (4 x threads) or a positive count");
  MLCD_RETURN_IF_ERROR(ValidateTransformParams(options.transform));
  return std::unique_ptr<DecodePool>(new DecodePool(options));
}

DecodePool::DecodePool(const DecodePoolOptions& options) : options_(options) {
  if (options_.max_in_flight == 0) options_.max_in_flight = 4 * options_.threads;
  output_floats_ = static_cast<size_t>(options_.transform.channels) *
                   options_.transform.image_size * options_.transform.image_size;
  threads_.reserve(options_.threads);
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Run(); });
}

DecodePool::~DecodePool() {
  Stop();
  for (std::thread& t : threads_) t.join();
}

void DecodePool::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  room_cv_.notify_all();
}

void DecodePool::Close() {
  {
    MutexLock lock(&mu_);
    closed_ = true;
  }
  done_cv_.notify_all();
  room_cv_.notify_all();
}

bool DecodePool::Submit(DecodeJob job) {
  MutexLock lock(&mu_);
  room_cv_.wait(lock.native(), [&] {
    mu_.AssertHeld();
    return stopped_ || static_cast<int>(slots_.size()) < options_.max_in_flight;
  });
  if (stopped_ || closed_) return false;
  slots_.emplace_back();
  slots_.back().job = std::move(job);
  lock.Unlock();
  work_cv_.notify_one();
  return true;
}

int DecodePool::room() const {
  MutexLock lock(&mu_);
  return stopped_ || closed_ ? 0 : options_.max_in_flight - static_cast<int>(slots_.size());
}

int DecodePool::pending() const {
  MutexLock lock(&mu_);
  return static_cast<int>(slots_.size());
}

DecodedSample DecodePool::Next() {
  MutexLock lock(&mu_);
  DecodedSample out;
  done_cv_.wait(lock.native(), [&] {
    mu_.AssertHeld();
    return stopped_ || (slots_.empty() && closed_) || (!slots_.empty() && slots_.front().done);
  });
  if (stopped_) {
    out.status = Status::Cancelled("decode pool stopped");
    return out;
  }
  if (slots_.empty()) {
    out.status = Status::OutOfRange("decode pool closed and drained");
    return out;
  }
  out = std::move(slots_.front().result);
  slots_.pop_front();
  --next_start_;
  lock.Unlock();
  room_cv_.notify_one();
  return out;
}

void DecodePool::Run() {
  MutexLock lock(&mu_);
  while (true) {
    work_cv_.wait(lock.native(), [&] {
      mu_.AssertHeld();
      return stopped_ || next_start_ < slots_.size();
    });
    if (stopped_) return;
    // Slots are never moved while this thread works on one (a deque keeps references on
    // push_back / pop_front, and Next() pops only finished slots).
    Slot& slot = slots_[next_start_++];
    slot.started = true;
    DecodeJob job = std::move(slot.job);
    lock.Unlock();
    DecodedSample result = Process(job);
    lock.Lock();
    slot.result = std::move(result);
    slot.done = true;
    done_cv_.notify_all();
  }
}

DecodedSample DecodePool::Process(DecodeJob& job) const {
  DecodedSample s;
  s.sample_id = job.key.id;
  try {
    if (job.bytes.empty() && job.fetch) {
      const auto start = std::chrono::steady_clock::now();
      StatusOr<std::string> bytes = job.fetch();
      s.fetch_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!bytes.ok()) {
        s.status = bytes.status();
        return s;
      }
      job.bytes = std::move(bytes).value();
    }
    float* out = job.destination;
    if (!out) {
      s.pixels.resize(output_floats_);
      out = s.pixels.data();
    }
    StatusOr<TransformTimings> t = DecodeAndTransform(
        reinterpret_cast<const uint8_t*>(job.bytes.data()), job.bytes.size(), options_.transform,
        options_.mode, job.key, out, options_.memory_budget.get());
    if (!t.ok()) {
      s.status = t.status();
      s.pixels.clear();
      return s;
    }
    s.timings = *t;
  } catch (const std::bad_alloc&) {
    s.status =
        Status::ResourceExhausted("out of memory decoding sample " + std::to_string(job.key.id));
    s.pixels.clear();
  } catch (const std::exception& e) {
    s.status = Status::Internal("decoding sample " + std::to_string(job.key.id) + ": " + e.what());
    s.pixels.clear();
  }
  return s;
}

}  // namespace mlcd::worker
