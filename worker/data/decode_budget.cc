#include "worker/data/decode_budget.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>

#include "common/host_memory.h"
#include "common/limits.h"

namespace mlcd::worker {

std::string FormatMegabytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

StatusOr<DecodeBudgetChoice> ChooseDecodeMemoryBudget(const DecodeBudgetInputs& in) {
  const int64_t asked = in.spec_mb > 0 ? in.spec_mb : kDefaultDecodeMemoryMb;
  DecodeBudgetChoice c;
  c.mb = asked;
  c.source = "dataset.decode_memory_mb " + std::to_string(asked);
  std::string raise = "raise dataset.decode_memory_mb";
  if (in.ceiling_mb > 0 && in.ceiling_mb < c.mb) {
    c.mb = in.ceiling_mb;
    c.source += " lowered to the worker's --max-decode-memory-mb " + std::to_string(c.mb);
    raise = "raise --max-decode-memory-mb on the worker agent";
  }
  if (in.host_available >= 0) {
    const int64_t share = in.host_available / kDecodeMemoryHostShareDivisor >> 20;
    if (share < c.mb) {
      c.mb = share;
      c.source = "dataset.decode_memory_mb " + std::to_string(asked) + " lowered to 1/" +
                 std::to_string(kDecodeMemoryHostShareDivisor) + " of the " +
                 std::to_string(in.host_available >> 20) + " MiB this host has available";
      raise = "free memory on this host";
    }
  }
  c.lowered = c.mb < asked;
  const int64_t threads = std::max(1, in.loader_threads);
  const int64_t need = threads * kDecodeMemoryPerLoaderThreadMb;
  if (need > c.mb) {
    const int64_t fit = c.mb / kDecodeMemoryPerLoaderThreadMb;
    return Status::ResourceExhausted(
        "dataset.loader_threads " + std::to_string(threads) + " need " + std::to_string(threads) +
        " x " + std::to_string(kDecodeMemoryPerLoaderThreadMb) + " MiB = " + std::to_string(need) +
        " MiB of decode memory, but this worker's decode budget is " + std::to_string(c.mb) +
        " MiB (" + c.source + "); " +
        (fit > 0 ? "use at most " + std::to_string(fit) + " loader threads, or "
                 : "no loader thread fits; ") +
        raise);
  }
  return c;
}

namespace {
std::atomic<int64_t> process_ceiling_mb{kDefaultMaxDecodeMemoryMb};
}  // namespace

void SetDecodeMemoryCeilingMb(int64_t mb) { process_ceiling_mb = mb; }
int64_t DecodeMemoryCeilingMb() { return process_ceiling_mb; }

StatusOr<DecodeBudgetChoice> ChooseProcessDecodeMemoryBudget(int64_t spec_mb, int loader_threads) {
  static const int64_t host_available = HostBytesAvailable();
  DecodeBudgetInputs in;
  in.spec_mb = spec_mb;
  in.loader_threads = loader_threads;
  in.ceiling_mb = DecodeMemoryCeilingMb();
  in.host_available = host_available;
  return ChooseDecodeMemoryBudget(in);
}

DecodeMemoryBudget::DecodeMemoryBudget(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

namespace {

// The budgets alive in this process, one per capacity (SharedDecodeMemoryBudget).
class BudgetRegistry {
 public:
  std::shared_ptr<DecodeMemoryBudget> Get(uint64_t capacity_bytes) {
    MutexLock lock(&mu_);
    std::shared_ptr<DecodeMemoryBudget> budget = budgets_[capacity_bytes].lock();
    if (!budget) {
      budget = std::make_shared<DecodeMemoryBudget>(capacity_bytes);
      budgets_[capacity_bytes] = budget;
    }
    return budget;
  }

 private:
  Mutex mu_;
  std::map<uint64_t, std::weak_ptr<DecodeMemoryBudget>> budgets_ GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<DecodeMemoryBudget> SharedDecodeMemoryBudget(uint64_t capacity_bytes) {
  static BudgetRegistry* registry = new BudgetRegistry();  // never destroyed: used at exit
  return registry->Get(capacity_bytes);
}

StatusOr<DecodeMemoryBudget::Reservation> DecodeMemoryBudget::Reserve(uint64_t bytes,
                                                                      const std::string& what) {
  if (bytes > capacity_) {
    return Status::InvalidArgument(
        what + " needs " + FormatMegabytes(bytes) + " to decode, more than the worker's whole " +
        "decode memory budget of " + FormatMegabytes(capacity_) +
        " (dataset.decode_memory_mb, at most the worker's --max-decode-memory-mb and a share "
        "of its host's memory); shrink the image or raise the budget within those bounds");
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
