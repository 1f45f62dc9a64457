// glibc malloc settings for processes that repeat the same large allocations every step.
//
// A training or embedding step allocates its activations (megabytes each) and frees them at
// the end of the step. With glibc's defaults many of those blocks are served by mmap and
// returned to the kernel when freed, or trimmed off the heap top, so every step page-faults
// its whole working set back in, zero-filled by the kernel: on this machine's 2 cores a
// ViT-tiny train step ran 2.4x slower (175 vs 426 images/s per thread) and `mlcd-worker eval`
// embedded 2.1x slower, with a third of the time spent in the kernel.
// KeepFreedMemoryForReuse() keeps freed memory in the process instead: blocks up to 32 MiB
// (glibc's largest allowed mmap threshold) come from the heap, and the heap is not trimmed,
// so the resident size settles at the peak working set after the first steps.
#pragma once

#include <climits>

namespace mlcd {

// The settings KeepFreedMemoryForReuse() applies (glibc's MALLOC_MMAP_THRESHOLD_ and
// MALLOC_TRIM_THRESHOLD_ give another process the same ones).
inline constexpr int kMallocMmapThresholdBytes = 32 << 20;
inline constexpr int kMallocTrimThresholdBytes = INT_MAX;

// Call at the start of main() of compute processes (mlcd-worker, mlcd-clusterd, benchmarks).
// Leaves malloc alone when the user set MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or
// MLCD_NO_MALLOC_TUNING in the environment. Returns whether it changed anything.
bool KeepFreedMemoryForReuse();

}  // namespace mlcd
