// CPU kernels behind the ViT's fused operations (worker/model/vit.h). Plain loops over raw
// pointers, parallel over (sample, head) or over element ranges with at::parallel_for; the
// file is compiled with -O3 and each float entry point is cloned for AVX-512, AVX2 and the
// baseline (the loader picks the clone for the CPU it runs on), so the inner loops vectorise.
//
// Layouts (row-major, no padding):
//   qkv   [B*T, 3*D]   row r = token t of sample b (r = b*T + t); columns [0,D) are the
//                      queries, [D,2D) the keys, [2D,3D) the values; head h owns columns
//                      h*hd .. (h+1)*hd of each part (D = H*hd). This is exactly the output
//                      of one fused qkv Linear, so no permute/copy is needed before or after.
//   out   [B*T, D]     heads concatenated the same way, ready for the output projection.
//   probs [B, H, T, T] softmax(scale * q k^T), kept for the backward pass (training only).
#pragma once

#include <cstdint>

namespace mlcd::worker::kernels {

// out = softmax(scale * Q K^T) V per (sample, head); also writes probs, unless probs is null
// (forward only: each row's probabilities stay in a per-thread row, nothing is kept).
void AttentionForward(const float* qkv, float* out, float* probs, int64_t batch, int64_t tokens,
                      int64_t heads, int64_t head_dim, float scale);
void AttentionForward(const double* qkv, double* out, double* probs, int64_t batch, int64_t tokens,
                      int64_t heads, int64_t head_dim, double scale);

// Gradient of the attention above: writes every element of grad_qkv ([B*T, 3*D]) from the
// forward's qkv and probs and the gradient of `out` (grad_out, [B*T, D]).
void AttentionBackward(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,
                       int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim, float scale);
void AttentionBackward(const double* qkv, const double* probs, const double* grad_out,
                       double* grad_qkv, int64_t batch, int64_t tokens, int64_t heads,
                       int64_t head_dim, double scale);

// Exact GELU, y = x * Phi(x), and its derivative dy/dx = Phi(x) + x * phi(x), in one pass.
// Phi uses erf with an absolute error below 2e-7 (Abramowitz & Stegun 7.1.26 with an
// exp of float accuracy), well inside float rounding of the surrounding matmuls. dydx null:
// forward only (the same formula for y).
void GeluForward(const float* x, float* y, float* dydx, int64_t n);

// Quick GELU (OpenAI CLIP's), y = x * sigmoid(kQuickGeluSlope * x), and its derivative
// dy/dx = s + kQuickGeluSlope * x * s * (1 - s), in one pass; dydx null: forward only.
inline constexpr double kQuickGeluSlope = 1.702;
void QuickGeluForward(const float* x, float* y, float* dydx, int64_t n);

// LayerNorm over the rows of a row-major [rows, cols] matrix:
//   y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps)  (biased variance);
// also writes each row's mean and rstd ([rows] each) for the backward pass. Each row is
// read from memory once; its moments use the corrected two-pass formula while the row is
// in cache, and both passes re-centre on the rounded mean, so rows with a large mean and a
// small variance keep their precision.
void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int64_t rows, int64_t cols, float eps);
void LayerNormForward(const double* x, const double* gamma, const double* beta, double* y,
                      double* mean, double* rstd, int64_t rows, int64_t cols, double eps);

// Gradient of the LayerNorm above from the forward's x, mean, rstd and the output gradient
// grad_y, one pass per row: writes every element of grad_x and ADDS
// dL/dgamma = sum_rows grad_y * xhat and dL/dbeta = sum_rows grad_y to grad_gamma /
// grad_beta ([cols] each). Any of the three
// outputs may be null (not needed). The parameter gradients are summed per fixed block of
// rows and the blocks reduced in order, so the result does not depend on the thread count.
void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                       const float* grad_y, float* grad_x, float* grad_gamma, float* grad_beta,
                       int64_t rows, int64_t cols);
void LayerNormBackward(const double* x, const double* gamma, const double* mean, const double* rstd,
                       const double* grad_y, double* grad_x, double* grad_gamma, double* grad_beta,
                       int64_t rows, int64_t cols);

// One AdamW step (decoupled weight decay, as torch.optim.AdamW) over n contiguous
// parameters:  g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//              p = p (1 - lr wd) - lr/bc1 * m / (sqrt(v / bc2) + eps)
// with bc1 = 1 - b1^t, bc2 = 1 - b2^t for step t >= 1. grad_scale folds gradient clipping
// (and averaging) into the same pass.
struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.98f;
  float eps = 1e-6f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;
  int64_t step = 1;
};
void AdamWUpdate(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamWHyper& hyper);

// out[i, :] = bias + residual[i, :] for a row-major [rows, cols] matrix (residual may be
// null): the initial value an in-place GEMM then accumulates into, so bias and residual add
// cost no extra pass.
void FillBiasResidual(const float* bias, const float* residual, int64_t rows, int64_t cols,
                      float* out);

// out[j] += sum_i x[i * cols + j] for a row-major [rows, cols] matrix (a bias gradient).
void AddColumnSums(const float* x, int64_t rows, int64_t cols, float* out);

// Sum of squares of n floats (accumulated in double), for gradient-norm clipping.
double SumOfSquares(const float* x, int64_t n);

}  // namespace mlcd::worker::kernels
