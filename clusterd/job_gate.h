// FIFO admission of clusterd's heavy jobs: one runs, at most max_queued wait (clusterd/service.h
// describes the policy).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace mlcd::clusterd {

// FIFO admission of one job at a time.
class JobGate {
 public:
  explicit JobGate(int max_queued) : max_queued_(max_queued) {}
  // Waits for the slot. RESOURCE_EXHAUSTED when max_queued callers already wait; CANCELLED
  // when should_stop() turns true while waiting. on_wait(position) is called when the caller
  // has to wait (position 1 = next).
  Status Acquire(const std::function<bool()>& should_stop, const std::function<void(int)>& on_wait);
  void Release();
  int running() const;
  int queued() const;

 private:
  mutable Mutex mu_;
  std::condition_variable cv_;
  const int max_queued_;
  bool busy_ GUARDED_BY(mu_) = false;
  uint64_t next_ticket_ GUARDED_BY(mu_) = 0;
  std::list<uint64_t> waiters_ GUARDED_BY(mu_);
};

}  // namespace mlcd::clusterd
