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

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace mlcd {

template <typename T>
class PrefetchQueue {
 public:
  // At most `capacity` (>= 1; smaller values mean 1) items wait to be popped.
  explicit PrefetchQueue(int capacity) : capacity_(std::max(1, capacity)) {}

  // Producer: blocks until there is room. False once Stop() was called.
  bool WaitForRoom() {
    MutexLock lock(&mu_);
    cv_.wait(lock.native(), [&] {
      mu_.AssertHeld();
      return stopped_ || static_cast<int>(items_.size()) < capacity_;
    });
    return !stopped_;
  }

  // Producer: sleeps `duration` (a retry back-off). True when Stop() was called meanwhile.
  template <typename Duration>
  bool SleepUnlessStopped(Duration duration) {
    MutexLock lock(&mu_);
    return cv_.wait_for(lock.native(), duration, [&] {
      mu_.AssertHeld();
      return stopped_;
    });
  }

  void Push(T item) {
    {
      MutexLock lock(&mu_);
      items_.push_back(std::move(item));
    }
    cv_.notify_all();
  }

  // Consumer: blocks until an item is there; `waited_seconds` (optional) gets the time blocked.
  T Pop(double* waited_seconds = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    MutexLock lock(&mu_);
    cv_.wait(lock.native(), [&] {
      mu_.AssertHeld();
      return !items_.empty();
    });
    if (waited_seconds)
      *waited_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    T item = std::move(items_.front());
    items_.pop_front();
    lock.Unlock();
    cv_.notify_all();
    return item;
  }

  // Releases a producer waiting in WaitForRoom / SleepUnlessStopped; they return "stopped".
  void Stop() {
    {
      MutexLock lock(&mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

 private:
  const int capacity_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_ GUARDED_BY(mu_);
  bool stopped_ GUARDED_BY(mu_) = false;
};

}  // namespace mlcd
