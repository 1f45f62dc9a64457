#include "clusterd/compute_env.h"

#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/utils/distances.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>

#include "common/blas_env.h"
#include "common/mutex.h"

namespace mlcd::clusterd {
namespace {

// Guards which ComputeScope owns faiss::InterruptCallback::instance.
Mutex g_interrupt_mu;
ComputeScope* g_interrupt_owner GUARDED_BY(g_interrupt_mu) = nullptr;

class ScopeInterrupt : public faiss::InterruptCallback {
 public:
  explicit ScopeInterrupt(ComputeScope* scope) : scope_(scope) {}
  bool want_interrupt() override { return scope_->ShouldStop(); }

 private:
  ComputeScope* scope_;
};

}  // namespace

Status CheckThreads(int threads) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads < 0 || threads > cores) {
    return Status::InvalidArgument("threads: " + std::to_string(threads) + " is not in [0, " +
                                   std::to_string(cores) + "] (0 = all cores; this host has " +
                                   std::to_string(cores) + ")");
  }
  return Status::Ok();
}

ComputeScope::ComputeScope(int threads, std::function<bool()> should_stop)
    : should_stop_(std::move(should_stop)) {
  saved_database_block_ = faiss::distance_compute_blas_database_bs;
  if (saved_database_block_ < kDatabaseBlock)
    faiss::distance_compute_blas_database_bs = kDatabaseBlock;
  if (threads > 0) {
    set_threads_ = true;
    saved_blas_threads_ = BlasThreads();
    omp_threads_.emplace(threads);
    SetBlasThreads(threads);
  }
  if (should_stop_) {
    MutexLock lock(&g_interrupt_mu);
    if (g_interrupt_owner == nullptr) {
      // FAISS's own std::mutex: not a capability, so clang cannot check what it guards.
      std::lock_guard<std::mutex> faiss_lock(faiss::InterruptCallback::lock);
      faiss::InterruptCallback::instance.reset(new ScopeInterrupt(this));
      g_interrupt_owner = this;
      installed_interrupt_ = true;
    }
  }
}

ComputeScope::~ComputeScope() {
  faiss::distance_compute_blas_database_bs = saved_database_block_;
  if (installed_interrupt_) {
    MutexLock lock(&g_interrupt_mu);
    {
      std::lock_guard<std::mutex> faiss_lock(faiss::InterruptCallback::lock);
      faiss::InterruptCallback::instance.reset();
    }
    g_interrupt_owner = nullptr;
  }
  if (set_threads_) {
    omp_threads_.reset();
    if (saved_blas_threads_ > 0) SetBlasThreads(saved_blas_threads_);
  }
}

bool ComputeScope::stopped() const { return stopped_.load(); }

bool ComputeScope::ShouldStop() {
  if (stopped_.load()) return true;
  if (should_stop_ && should_stop_()) stopped_.store(true);
  return stopped_.load();
}

}  // namespace mlcd::clusterd
