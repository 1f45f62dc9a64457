#include "coordinator/watch_streams.h"

#include <utility>

namespace mlcd::coordinator {

WatchStreamLimits::WatchStreamLimits(int total, int per_identity)
    : total_(total), per_identity_(per_identity) {}

StatusOr<WatchStreamLimits::Slot> WatchStreamLimits::Open(const std::string& identity) {
  MutexLock lock(&mu_);
  auto it = by_identity_.find(identity);
  const int mine = it == by_identity_.end() ? 0 : it->second;
  if (mine >= per_identity_) {
    return Status::ResourceExhausted(
        std::to_string(mine) + " WatchJob streams of " +
        (identity.empty() ? std::string("unauthenticated callers") : "'" + identity + "'") +
        " are open, the most one identity may hold (--max-watch-streams-per-identity); close "
        "one, retry later or poll GetJob");
  }
  if (open_ >= total_) {
    return Status::ResourceExhausted(std::to_string(open_) +
                                     " WatchJob streams are open (--max-watch-streams); retry "
                                     "later or poll GetJob");
  }
  ++open_;
  ++by_identity_[identity];
  return Slot(this, identity);
}

void WatchStreamLimits::Close(const std::string& identity) {
  MutexLock lock(&mu_);
  --open_;
  auto it = by_identity_.find(identity);
  if (it != by_identity_.end() && --it->second <= 0) by_identity_.erase(it);
}

int WatchStreamLimits::open() const {
  MutexLock lock(&mu_);
  return open_;
}

int WatchStreamLimits::open_by(const std::string& identity) const {
  MutexLock lock(&mu_);
  auto it = by_identity_.find(identity);
  return it == by_identity_.end() ? 0 : it->second;
}

WatchStreamLimits::Slot::Slot(Slot&& other) noexcept
    : limits_(std::exchange(other.limits_, nullptr)), identity_(std::move(other.identity_)) {}

WatchStreamLimits::Slot& WatchStreamLimits::Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    Release();
    limits_ = std::exchange(other.limits_, nullptr);
    identity_ = std::move(other.identity_);
  }
  return *this;
}

WatchStreamLimits::Slot::~Slot() { Release(); }

void WatchStreamLimits::Slot::Release() {
  if (limits_) limits_->Close(identity_);
  limits_ = nullptr;
}

}  // namespace mlcd::coordinator
