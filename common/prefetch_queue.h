// A bounded single-producer / single-consumer queue for background prefetchers (the worker's
// batch loader and label prefetcher): the producer thread waits for room, the consumer waits
// for an item, and Stop() releases a waiting producer for good.
//
//   PrefetchQueue<StatusOr<Batch>> queue(2);
//   // producer thread
//   while (queue.WaitForRoom()) queue.Push(Load(...));
//   // consumer
//   double waited;
//   StatusOr<Batch> b = queue.Pop(&waited);
//   // owner's destructor
//   queue.Stop(); thread.join();
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

namespace mlcd {

template <typename T>
class PrefetchQueue {
 public:
  // At most `capacity` (>= 1; smaller values mean 1) items wait to be popped.
  explicit PrefetchQueue(int capacity) : capacity_(std::max(1, capacity)) {}

  // Producer: blocks until there is room. False once Stop() was called.
  bool WaitForRoom() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stopped_ || static_cast<int>(items_.size()) < capacity_; });
    return !stopped_;
  }

  // Producer: sleeps `duration` (a retry back-off). True when Stop() was called meanwhile.
  template <typename Duration>
  bool SleepUnlessStopped(Duration duration) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, duration, [&] { return stopped_; });
  }

  void Push(T item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(item));
    }
    cv_.notify_all();
  }

  // Consumer: blocks until an item is there; `waited_seconds` (optional) gets the time blocked.
  T Pop(double* waited_seconds = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !items_.empty(); });
    if (waited_seconds)
      *waited_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    T item = std::move(items_.front());
    items_.pop_front();
    lock.unlock();
    cv_.notify_all();
    return item;
  }

  // Releases a producer waiting in WaitForRoom / SleepUnlessStopped; they return "stopped".
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

 private:
  const int capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool stopped_ = false;
};

}  // namespace mlcd
