// The decode memory a worker's loader threads share (dataset.decode_memory_mb): before a
// thread decodes an image it reserves the bytes of the decoded pixels (width x height x
// channels, read from the header), and waits while the other threads hold the budget; the
// reservation ends when the image has been transformed. So the decoders of a worker never hold
// more than the budget at once, whatever dataset.loader_threads is (a 291 KB PNG of 9990 x 9990
// zeros decodes to ~300 MB). An image larger than the whole budget is refused, never waited
// for: the caller counts it as a bad sample (worker/train/bad_samples.h).
//
// Waiters are served in arrival order, so a large image is not starved by small ones. A wait
// always ends: every reservation is held only while one image is decoded and transformed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace mlcd::worker {

class DecodeMemoryBudget {
 public:
  // `capacity_bytes` > 0: the most bytes reserved at once.
  explicit DecodeMemoryBudget(uint64_t capacity_bytes);
  DecodeMemoryBudget(const DecodeMemoryBudget&) = delete;
  DecodeMemoryBudget& operator=(const DecodeMemoryBudget&) = delete;

  // Bytes held until destroyed (or moved from); an empty one holds none.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation();
    uint64_t bytes() const { return bytes_; }

   private:
    friend class DecodeMemoryBudget;
    Reservation(DecodeMemoryBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    void Release();
    DecodeMemoryBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // Waits until `bytes` fit beside what the others hold, then holds them. INVALID_ARGUMENT
  // when `bytes` exceed the whole budget; the message names `what` (e.g. "a 9990 x 9990 x 3
  // PNG"), both sizes and the spec field that raises the budget.
  StatusOr<Reservation> Reserve(uint64_t bytes, const std::string& what);

  uint64_t capacity() const { return capacity_; }
  // Bytes held now, and the most ever held at once.
  uint64_t reserved() const;
  uint64_t peak_reserved() const;

 private:
  void Release(uint64_t bytes);

  const uint64_t capacity_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  uint64_t reserved_ GUARDED_BY(mu_) = 0;
  uint64_t peak_ GUARDED_BY(mu_) = 0;
  // Arrival order: the waiter holding ticket `serving_` is the next to reserve.
  uint64_t next_ticket_ GUARDED_BY(mu_) = 0;
  uint64_t serving_ GUARDED_BY(mu_) = 0;
};

// The process's budget of `capacity_bytes`: every dataset a worker process opens with the same
// dataset.decode_memory_mb (its training and evaluation sets) shares one, for as long as one
// of them holds it; so the loader threads of all of them together stay within it.
std::shared_ptr<DecodeMemoryBudget> SharedDecodeMemoryBudget(uint64_t capacity_bytes);

// "299.4 MB" (10^6 bytes) for messages.
std::string FormatMegabytes(uint64_t bytes);

// The budget a worker process's image datasets actually get: the spec's decode_memory_mb
// (kDefaultDecodeMemoryMb when 0), lowered to the worker's ceiling (--max-decode-memory-mb,
// which the agent passes to every child; kDefaultMaxDecodeMemoryMb when not given) and to one
// kDecodeMemoryHostShareDivisor-th of the memory the host has available. So the submitter
// chooses the budget only below what the worker allows.
struct DecodeBudgetInputs {
  int64_t spec_mb = 0;          // dataset.decode_memory_mb (0 = the default)
  int loader_threads = 0;       // dataset.loader_threads as the dataset runs them (> 0)
  int64_t ceiling_mb = 0;       // --max-decode-memory-mb (> 0)
  int64_t host_available = -1;  // HostBytesAvailable() in bytes; -1 = unknown (no host cap)
};

struct DecodeBudgetChoice {
  int64_t mb = 0;  // the budget used (MiB)
  // How it was chosen, for the log and messages: "dataset.decode_memory_mb 1024" or
  // "dataset.decode_memory_mb 4096 lowered to the worker's --max-decode-memory-mb 2048".
  std::string source;
  bool lowered = false;  // below what the spec asked for: the caller logs `source` as a warning
};

// The smallest of the three. RESOURCE_EXHAUSTED when it cannot give every loader thread its
// kDecodeMemoryPerLoaderThreadMb; the message names the threads, the need, the budget, where
// the cap came from, and the most threads that fit.
StatusOr<DecodeBudgetChoice> ChooseDecodeMemoryBudget(const DecodeBudgetInputs& in);

// The process's ceiling (--max-decode-memory-mb; worker/command_io.h adds the flag to the
// commands that open image datasets). Set before the first dataset is opened.
void SetDecodeMemoryCeilingMb(int64_t mb);
int64_t DecodeMemoryCeilingMb();

// ChooseDecodeMemoryBudget for this process: its ceiling and HostBytesAvailable() read at its
// first call (so the training and evaluation sets of a process get the same budget).
StatusOr<DecodeBudgetChoice> ChooseProcessDecodeMemoryBudget(int64_t spec_mb, int loader_threads);

}  // namespace mlcd::worker
