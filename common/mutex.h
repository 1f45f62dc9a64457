// mlcd::Mutex: std::mutex as a clang capability, so -Wthread-safety checks the GUARDED_BY and
// REQUIRES rules written against it (common/thread_annotations.h), and mlcd::MutexLock, its
// scoped lock. The design is LevelDB's and Abseil's, cut to what the code uses:
//
//   mutable Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   std::condition_variable cv_;
//   ...
//   MutexLock lock(&mu_);
//   cv_.wait(lock.native(), [&] { mu_.AssertHeld(); return count_ > 0; });
//
// Condition variables stay std::condition_variable: a wait takes MutexLock::native(). The
// analysis does not see into a wait's predicate (a lambda is a function of its own), so a
// predicate that reads guarded members starts with mu_.AssertHeld(). Locking and its order are
// exactly std::mutex's; the wrappers add nothing at run time. mlcd::SharedMutex is
// std::shared_mutex the same way, with WriterMutexLock and ReaderMutexLock.
#pragma once

#include <mutex>
#include <shared_mutex>

#include "common/thread_annotations.h"

namespace mlcd {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the mutex (a condition variable's predicate, a
  // callback run under the lock). Checks nothing at run time: std::mutex has no owner to ask.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction; Unlock()/Lock() release and retake it inside
// the scope (the destructor releases it only if held).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // For std::condition_variable::wait / wait_for / wait_until, which release and retake the
  // mutex inside the call and return holding it. Use for nothing else.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// Readers and writers: GUARDED_BY(shared_mu) members are read with a ReaderMutexLock (or a
// writer's) held and written only with a WriterMutexLock.
class CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

 private:
  friend class WriterMutexLock;
  friend class ReaderMutexLock;
  std::shared_mutex mu_;
};

// Holds `mu` exclusively from construction to destruction.
class SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~WriterMutexLock() RELEASE() = default;
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  std::unique_lock<std::shared_mutex> lock_;
};

// Holds `mu` shared from construction to destruction.
class SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu) ACQUIRE_SHARED(mu) : lock_(mu->mu_) {}
  ~ReaderMutexLock() RELEASE() = default;
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  std::shared_lock<std::shared_mutex> lock_;
};

}  // namespace mlcd
