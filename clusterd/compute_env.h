// The compute environment of one clustering job: thread counts for OpenMP (FAISS) and
// OpenBLAS, FAISS's GEMM block sizes, and cancellation that reaches into FAISS's long
// searches.
//
// GEMM sizes: FAISS's exhaustive inner-product search multiplies blocks of 4096 query rows
// by blocks of `distance_compute_blas_database_bs` centroids (default 1024) and then scans
// each block into per-row top-l heaps. With d around 128 that sgemm is short and the many
// calls cost their thread start-up; blocks of 4096 centroids (a 64 MiB scratch block) were
// about 20% faster here (k = 4096, d = 128, 2 cores), so a scope raises the block to
// kDatabaseBlock for its lifetime. Results are unchanged: blocking splits the centroids, not
// the sums over d.
//
//   ComputeScope scope(params.threads, should_stop);
//   try { clustering.train(...); } catch (const faiss::FaissException&) {
//     if (scope.stopped()) return Status::Cancelled(...);
//   }
//
// Thread counts are process-wide settings, so the service runs one heavy job at a time. The
// FAISS interrupt callback is process-wide too: only the first live scope installs it (later
// concurrent scopes still stop between iterations and chunks, just not inside one search).
#pragma once

#include <atomic>
#include <functional>
#include <optional>

#include "common/blas_env.h"
#include "common/status.h"

namespace mlcd::clusterd {

// A request's `threads`: 0 (all cores) up to this host's cores. More would only oversubscribe,
// and tens of thousands make OpenMP fail to start them and OpenBLAS hang at exit.
Status CheckThreads(int threads);

class ComputeScope {
 public:
  static constexpr int kDatabaseBlock = 4096;

  // threads > 0 sets OpenMP and OpenBLAS to that many threads for the scope's lifetime (0 =
  // leave as is: all cores). `should_stop` (may be empty) is polled by FAISS during searches.
  ComputeScope(int threads, std::function<bool()> should_stop);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

  // True once should_stop returned true (then FAISS calls throw FaissException).
  bool stopped() const;
  // Polls should_stop now.
  bool ShouldStop();

 private:
  std::function<bool()> should_stop_;
  std::atomic<bool> stopped_{false};
  bool installed_interrupt_ = false;
  std::optional<ScopedOmpThreads> omp_threads_;
  int saved_blas_threads_ = 0;
  int saved_database_block_ = 0;
  bool set_threads_ = false;
};

}  // namespace mlcd::clusterd
