#include "worker/data/decode_budget.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace mlcd::worker {

std::string FormatMegabytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

DecodeMemoryBudget::DecodeMemoryBudget(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

std::shared_ptr<DecodeMemoryBudget> SharedDecodeMemoryBudget(uint64_t capacity_bytes) {
  static std::mutex mu;
  static std::map<uint64_t, std::weak_ptr<DecodeMemoryBudget>>* budgets =
      new std::map<uint64_t, std::weak_ptr<DecodeMemoryBudget>>();
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<DecodeMemoryBudget> budget = (*budgets)[capacity_bytes].lock();
  if (!budget) {
    budget = std::make_shared<DecodeMemoryBudget>(capacity_bytes);
    (*budgets)[capacity_bytes] = budget;
  }
  return budget;
}

StatusOr<DecodeMemoryBudget::Reservation> DecodeMemoryBudget::Reserve(uint64_t bytes,
                                                                      const std::string& what) {
  if (bytes > capacity_) {
    return Status::InvalidArgument(
        what + " needs " + FormatMegabytes(bytes) + " to decode, more than the worker's whole " +
        "decode memory budget of " + FormatMegabytes(capacity_) +
        " (dataset.decode_memory_mb); shrink the image or raise the budget");
  }
  MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  cv_.wait(lock.native(), [&] {
    mu_.AssertHeld();
    return serving_ == ticket && reserved_ + bytes <= capacity_;
  });
  reserved_ += bytes;
  peak_ = std::max(peak_, reserved_);
  ++serving_;
  lock.Unlock();
  cv_.notify_all();
  return Reservation(this, bytes);
}

void DecodeMemoryBudget::Release(uint64_t bytes) {
  {
    MutexLock lock(&mu_);
    reserved_ -= bytes;
  }
  cv_.notify_all();
}

uint64_t DecodeMemoryBudget::reserved() const {
  MutexLock lock(&mu_);
  return reserved_;
}

uint64_t DecodeMemoryBudget::peak_reserved() const {
  MutexLock lock(&mu_);
  return peak_;
}

DecodeMemoryBudget::Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DecodeMemoryBudget::Reservation& DecodeMemoryBudget::Reservation::operator=(
    Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DecodeMemoryBudget::Reservation::~Reservation() { Release(); }

void DecodeMemoryBudget::Reservation::Release() {
  if (budget_ && bytes_ > 0) budget_->Release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

}  // namespace mlcd::worker
