// The WatchJob streams open at once. Each holds a server thread until its job ends or its
// caller goes away, so they are bounded per caller identity (--max-watch-streams-per-identity)
// and in all (--max-watch-streams, the larger): one viewer holding all its streams leaves the
// others room to watch.
#pragma once

#include <map>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace mlcd::coordinator {

class WatchStreamLimits {
 public:
  // `total` >= 1 streams in all, `per_identity` >= 1 for one identity.
  WatchStreamLimits(int total, int per_identity);
  WatchStreamLimits(const WatchStreamLimits&) = delete;
  WatchStreamLimits& operator=(const WatchStreamLimits&) = delete;

  // A stream counted until destroyed (or moved from).
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept;
    Slot& operator=(Slot&& other) noexcept;
    ~Slot();

   private:
    friend class WatchStreamLimits;
    Slot(WatchStreamLimits* limits, std::string identity)
        : limits_(limits), identity_(std::move(identity)) {}
    void Release();
    WatchStreamLimits* limits_ = nullptr;
    std::string identity_;
  };

  // A slot for one more stream of `identity` (empty: an unauthenticated caller, one identity
  // for all of them). RESOURCE_EXHAUSTED naming the limit and its flag when the identity has
  // `per_identity` streams open or all identities together `total`.
  StatusOr<Slot> Open(const std::string& identity);

  int open() const;
  int open_by(const std::string& identity) const;

 private:
  void Close(const std::string& identity);

  const int total_;
  const int per_identity_;
  mutable Mutex mu_;
  int open_ GUARDED_BY(mu_) = 0;
  std::map<std::string, int> by_identity_ GUARDED_BY(mu_);
};

}  // namespace mlcd::coordinator
