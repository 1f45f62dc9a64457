// The inner loop of the linear probe: multinomial logistic loss and gradient over a range of
// feature rows in one pass (each row is read once: logits, softmax and the gradient outer
// product while it is in L1). A BLAS GEMM of n x d by d x classes (classes ~10) is a poor
// shape for OpenBLAS (packing dominates: ~60 ms for 60000 x 512 on this machine, against
// ~10 ms here), so the probe uses these loops, cloned for AVX-512 / AVX2 / baseline x86-64.
// No torch here.
#pragma once

#include <cstdint>
#include <functional>

namespace mlcd::worker::kernels {

// Runs fn(i) for i in [0, n) on up to `threads` threads (std::thread; the calling thread takes
// a share). at::parallel_for would need this file compiled with -fopenmp to run in parallel
// (ATen's OpenMP backend is a header pragma), which the worker's sources are not.
void ParallelFor(int64_t n, int threads, const std::function<void(int64_t)>& fn);

// For rows i in [begin, end) of x (row-major, `dim` floats per row) with labels y[i] in
// [0, classes): z = W x_i + b (W: classes x dim, row-major), p = softmax(z). Returns
// Σ_i (logsumexp(z) − z_{y_i}) in double. When grad_w is not null, adds
// scale·(p − onehot(y_i)) ⊗ x_i to grad_w (classes x dim, double) and scale·(p − onehot) to
// grad_b (classes, double); rows are accumulated in float over blocks of 64 and then added
// in double.
double LogisticLossGradRows(const float* x, int64_t dim, const int64_t* y, int64_t begin,
                            int64_t end, const float* w, const float* b, int classes, double scale,
                            double* grad_w, double* grad_b);

// Logits of rows [begin, end) into z ((end − begin) x classes, row-major).
void LogitsRows(const float* x, int64_t dim, int64_t begin, int64_t end, const float* w,
                const float* b, int classes, float* z);

}  // namespace mlcd::worker::kernels
