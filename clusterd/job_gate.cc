#include "clusterd/job_gate.h"

#include <string>

namespace mlcd::clusterd {

Status JobGate::Acquire(const std::function<bool()>& should_stop,
                        const std::function<void(int)>& on_wait) {
  MutexLock lock(&mu_);
  if (!busy_ && waiters_.empty()) {
    busy_ = true;
    return Status::Ok();
  }
  if (static_cast<int>(waiters_.size()) >= max_queued_) {
    return Status::ResourceExhausted("mlcd-clusterd is busy: one job is running and " +
                                     std::to_string(waiters_.size()) +
                                     " are queued (--max-queued); retry later");
  }
  const uint64_t ticket = next_ticket_++;
  waiters_.push_back(ticket);
  auto position = [&] {
    mu_.AssertHeld();
    int p = 1;
    for (uint64_t t : waiters_) {
      if (t == ticket) break;
      ++p;
    }
    return p;
  };
  int last_position = -1;
  for (;;) {
    if (!busy_ && waiters_.front() == ticket) {
      waiters_.pop_front();
      busy_ = true;
      cv_.notify_all();
      return Status::Ok();
    }
    if (should_stop && should_stop()) {
      waiters_.remove(ticket);
      cv_.notify_all();
      return Status::Cancelled("cancelled while waiting for the running clustering job");
    }
    int p = position();
    if (p != last_position && on_wait) {
      last_position = p;
      lock.Unlock();
      on_wait(p);
      lock.Lock();
      continue;
    }
    cv_.wait_for(lock.native(), std::chrono::milliseconds(100));
  }
}

void JobGate::Release() {
  MutexLock lock(&mu_);
  busy_ = false;
  cv_.notify_all();
}

int JobGate::running() const {
  MutexLock lock(&mu_);
  return busy_ ? 1 : 0;
}

int JobGate::queued() const {
  MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

}  // namespace mlcd::clusterd
