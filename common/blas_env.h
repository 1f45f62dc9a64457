// OpenBLAS core selection. Debian's OpenBLAS 0.3.21 does not recognise some newer CPUs and
// falls back to slow SSE3 kernels; OPENBLAS_CORETYPE fixes that but is read when the
// library loads, i.e. before main(). SelectOpenblasCoretype() therefore re-executes the
// process once with the variable set (SkylakeX with AVX-512, Haswell with AVX2) when the
// user has not set it, and logs the choice. MLCD_NO_BLAS_TUNING=1 turns it off (tests and CI
// set it so their results never depend on the CPU).
#pragma once

namespace mlcd {

// Call first in main() of programs whose speed depends on BLAS. Returns normally when
// nothing needs to change; otherwise does not return (execv).
void SelectOpenblasCoretype(int argc, char** argv);

// OpenBLAS's own thread pool (0 when the BLAS in use is not OpenBLAS). Debian's libtorch and
// FAISS call the system BLAS, whose pool is sized to all cores whatever at::set_num_threads
// or omp_set_num_threads say; a process meant to use N cores must set both, or its GEMMs
// oversubscribe the machine (2 one-thread workers on 2 cores ran ~1.5x slower with OpenBLAS's
// default pool of 2 threads each). Looked up at run time, so callers need not link OpenBLAS.
int BlasThreads();
// Sets OpenBLAS's thread count (no-op for other BLAS libraries or threads <= 0).
void SetBlasThreads(int threads);

// Sets the OpenMP thread count of the calling thread (omp_set_num_threads acts on the calling
// thread's ICV, which ATen's parallel_for and FAISS read) for the object's lifetime and puts
// the previous count back after. threads <= 0 changes nothing; so does a process without
// libgomp. libgomp is looked up at run time, so callers need not link OpenMP.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  void (*set_)(int) = nullptr;
  int saved_ = 0;
};

}  // namespace mlcd
