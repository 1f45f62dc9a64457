#include "worker/model/vit_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

// Clone the hot range functions for AVX-512 / AVX2 / baseline x86-64 (GCC ifunc dispatch).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLCD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLCD_CLONES
#endif
#define MLCD_INLINE inline __attribute__((always_inline))

namespace mlcd::worker::kernels {
namespace {

// exp(x) for float accuracy (Cephes expf polynomial, Cody-Waite range reduction); written
// without branches or calls so loops over it vectorise. Inputs below -87 give ~0.
MLCD_INLINE float FastExp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float t = x * 1.44269504088896341f + magic;
  int32_t t_bits;
  std::memcpy(&t_bits, &t, sizeof(t_bits));
  float n = t - magic;
  int32_t magic_bits;
  std::memcpy(&magic_bits, &magic, sizeof(magic_bits));
  int32_t ni = t_bits - magic_bits;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  int32_t scale_bits = (ni + 127) << 23;
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return p * scale;
}
MLCD_INLINE double FastExp(double x) { return std::exp(x); }

// ---- attention --------------------------------------------------------------------------

struct AttentionShape {
  int64_t batch, tokens, heads, head_dim;
  int64_t width() const { return heads * head_dim; }
  int64_t qkv_stride() const { return 3 * width(); }
};

// Per-thread scratch: transposed keys/values (head_dim x T), one score row, dS (T x T).
template <typename T>
struct Scratch {
  std::vector<T> transposed, row, ds;
  void Reserve(int64_t tokens, int64_t head_dim) {
    transposed.resize(static_cast<size_t>(tokens * head_dim));
    row.resize(static_cast<size_t>(tokens));
    ds.resize(static_cast<size_t>(tokens * tokens));
  }
};

template <typename T>
Scratch<T>& ThreadScratch() {
  thread_local Scratch<T> scratch;
  return scratch;
}

// Rows [i] of Q/K/V for sample b, head h: base + i * stride.
// kKeep: write the probabilities to `probs` for the backward pass; otherwise (forward only)
// each row's probabilities live in the scratch row and `probs` is not touched.
template <typename T, bool kKeep>
MLCD_INLINE void AttentionForwardOne(const T* qkv, T* out, T* probs, const AttentionShape& s,
                                     int64_t bh, T scale, Scratch<T>& scratch) {
  const int64_t b = bh / s.heads, h = bh % s.heads;
  const int64_t n = s.tokens, hd = s.head_dim, ld = s.qkv_stride(), D = s.width();
  const T* q = qkv + b * n * ld + h * hd;
  const T* k = q + D;
  const T* v = q + 2 * D;
  T* o = out + b * n * D + h * hd;
  T* p_out = kKeep ? probs + bh * n * n : nullptr;
  T* kt = scratch.transposed.data();
  T* srow = scratch.row.data();
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < hd; ++d) kt[d * n + j] = k[j * ld + d];
  for (int64_t i = 0; i < n; ++i) {
    const T* qi = q + i * ld;
    for (int64_t j = 0; j < n; ++j) srow[j] = 0;
    for (int64_t d = 0; d < hd; ++d) {
      const T qd = qi[d] * scale;
      const T* ktd = kt + d * n;
      for (int64_t j = 0; j < n; ++j) srow[j] += qd * ktd[j];
    }
    T mx = srow[0];
    for (int64_t j = 1; j < n; ++j) mx = std::max(mx, srow[j]);
    T* pi = kKeep ? p_out + i * n : srow;
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      T e = FastExp(srow[j] - mx);
      pi[j] = e;
      sum += e;
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j < n; ++j) pi[j] *= inv;
    T* oi = o + i * D;
    for (int64_t d = 0; d < hd; ++d) oi[d] = 0;
    for (int64_t j = 0; j < n; ++j) {
      const T pj = pi[j];
      const T* vj = v + j * ld;
      for (int64_t d = 0; d < hd; ++d) oi[d] += pj * vj[d];
    }
  }
}

template <typename T>
MLCD_INLINE void AttentionBackwardOne(const T* qkv, const T* probs, const T* grad_out, T* grad_qkv,
                                      const AttentionShape& s, int64_t bh, T scale,
                                      Scratch<T>& scratch) {
  const int64_t b = bh / s.heads, h = bh % s.heads;
  const int64_t n = s.tokens, hd = s.head_dim, ld = s.qkv_stride(), D = s.width();
  const int64_t base = b * n * ld + h * hd;
  const T* q = qkv + base;
  const T* k = q + D;
  const T* v = q + 2 * D;
  T* dq = grad_qkv + base;
  T* dk = dq + D;
  T* dv = dq + 2 * D;
  const T* go = grad_out + b * n * D + h * hd;
  const T* p = probs + bh * n * n;
  T* vt = scratch.transposed.data();
  T* ds = scratch.ds.data();
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < hd; ++d) vt[d * n + j] = v[j * ld + d];
  for (int64_t i = 0; i < n; ++i) {
    const T* goi = go + i * D;
    const T* pi = p + i * n;
    T* dsi = ds + i * n;
    // dP_i = dO_i V^T
    for (int64_t j = 0; j < n; ++j) dsi[j] = 0;
    for (int64_t d = 0; d < hd; ++d) {
      const T g = goi[d];
      const T* vtd = vt + d * n;
      for (int64_t j = 0; j < n; ++j) dsi[j] += g * vtd[j];
    }
    // dS_i = P_i * (dP_i - <P_i, dP_i>), times the scale of the scores.
    T dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += pi[j] * dsi[j];
    for (int64_t j = 0; j < n; ++j) dsi[j] = pi[j] * (dsi[j] - dot) * scale;
    // dQ_i = dS_i K
    T* dqi = dq + i * ld;
    for (int64_t d = 0; d < hd; ++d) dqi[d] = 0;
    for (int64_t j = 0; j < n; ++j) {
      const T w = dsi[j];
      const T* kj = k + j * ld;
      for (int64_t d = 0; d < hd; ++d) dqi[d] += w * kj[d];
    }
  }
  // dK_j = sum_i dS_ij Q_i ; dV_j = sum_i P_ij dO_i
  for (int64_t j = 0; j < n; ++j) {
    T* dkj = dk + j * ld;
    T* dvj = dv + j * ld;
    for (int64_t d = 0; d < hd; ++d) {
      dkj[d] = 0;
      dvj[d] = 0;
    }
    for (int64_t i = 0; i < n; ++i) {
      const T w = ds[i * n + j];
      const T pw = p[i * n + j];
      const T* qi = q + i * ld;
      const T* goi = go + i * D;
      for (int64_t d = 0; d < hd; ++d) {
        dkj[d] += w * qi[d];
        dvj[d] += pw * goi[d];
      }
    }
  }
}

MLCD_CLONES void AttentionForwardRangeF(const float* qkv, float* out, float* probs,
                                        const AttentionShape& s, int64_t begin, int64_t end,
                                        float scale) {
  auto& scratch = ThreadScratch<float>();
  scratch.Reserve(s.tokens, s.head_dim);
  for (int64_t bh = begin; bh < end; ++bh)
    AttentionForwardOne<float, true>(qkv, out, probs, s, bh, scale, scratch);
}

MLCD_CLONES void AttentionInferenceRangeF(const float* qkv, float* out, const AttentionShape& s,
                                          int64_t begin, int64_t end, float scale) {
  auto& scratch = ThreadScratch<float>();
  scratch.Reserve(s.tokens, s.head_dim);
  for (int64_t bh = begin; bh < end; ++bh)
    AttentionForwardOne<float, false>(qkv, out, nullptr, s, bh, scale, scratch);
}

MLCD_CLONES void AttentionBackwardRangeF(const float* qkv, const float* probs,
                                         const float* grad_out, float* grad_qkv,
                                         const AttentionShape& s, int64_t begin, int64_t end,
                                         float scale) {
  auto& scratch = ThreadScratch<float>();
  scratch.Reserve(s.tokens, s.head_dim);
  for (int64_t bh = begin; bh < end; ++bh)
    AttentionBackwardOne<float>(qkv, probs, grad_out, grad_qkv, s, bh, scale, scratch);
}

int64_t AttentionGrain(const AttentionShape& s) {
  // About 64k multiply-adds per task keeps the parallel_for overhead negligible.
  const int64_t work = std::max<int64_t>(1, s.tokens * s.tokens * s.head_dim);
  return std::max<int64_t>(1, 65536 / work);
}

// ---- GELU -------------------------------------------------------------------------------

// kDerivative: also write dy/dx (the backward's factor); forward only otherwise.
template <bool kDerivative>
MLCD_INLINE void GeluLoop(const float* x, float* y, float* dydx, int64_t begin, int64_t end) {
  const float kInvSqrt2 = 0.70710678118654752f;
  const float kInvSqrt2Pi = 0.39894228040143268f;
  // Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + t (a2 + ...)) exp(-z^2), t = 1/(1+pz).
  const float p = 0.3275911f, a1 = 0.254829592f, a2 = -0.284496736f, a3 = 1.421413741f,
              a4 = -1.453152027f, a5 = 1.061405429f;
  for (int64_t i = begin; i < end; ++i) {
    const float xi = x[i];
    const float z = std::fabs(xi) * kInvSqrt2;
    const float e = FastExp(-z * z);  // = exp(-x^2/2)
    const float t = 1.0f / (1.0f + p * z);
    const float poly = t * (a1 + t * (a2 + t * (a3 + t * (a4 + t * a5))));
    float erf_abs = 1.0f - poly * e;
    const float erf = xi < 0 ? -erf_abs : erf_abs;
    const float cdf = 0.5f * (1.0f + erf);
    y[i] = xi * cdf;
    if (kDerivative) dydx[i] = cdf + xi * e * kInvSqrt2Pi;
  }
}

MLCD_CLONES void GeluRange(const float* x, float* y, float* dydx, int64_t begin, int64_t end) {
  GeluLoop<true>(x, y, dydx, begin, end);
}

MLCD_CLONES void GeluInferenceRange(const float* x, float* y, int64_t begin, int64_t end) {
  GeluLoop<false>(x, y, nullptr, begin, end);
}

// Quick GELU, y = x s, s = sigmoid(1.702 x); dy/dx = s + 1.702 x s (1 - s). FastExp clamps
// its argument, so s is ~0 (not NaN) for very negative x.
template <bool kDerivative>
MLCD_INLINE void QuickGeluLoop(const float* x, float* y, float* dydx, int64_t begin,
                               int64_t end) {
  const float alpha = static_cast<float>(kQuickGeluSlope);
  for (int64_t i = begin; i < end; ++i) {
    const float xi = x[i];
    const float s = 1.0f / (1.0f + FastExp(-alpha * xi));
    y[i] = xi * s;
    if (kDerivative) dydx[i] = s + alpha * xi * s * (1.0f - s);
  }
}

MLCD_CLONES void QuickGeluRange(const float* x, float* y, float* dydx, int64_t begin,
                                int64_t end) {
  QuickGeluLoop<true>(x, y, dydx, begin, end);
}

MLCD_CLONES void QuickGeluInferenceRange(const float* x, float* y, int64_t begin, int64_t end) {
  QuickGeluLoop<false>(x, y, nullptr, begin, end);
}

// ---- LayerNorm --------------------------------------------------------------------------

// Row reductions keep kLanes independent partial sums (vectorisable without reassociating
// the additions) and add the lanes up in a fixed order.
constexpr int kLanes = 16;

// Calls add(lane, j) for every j in [0, n): lane j % kLanes in whole blocks, 0 in the tail.
template <typename Add>
MLCD_INLINE void ForLanes(int64_t n, Add add) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) add(l, j + l);
  for (; j < n; ++j) add(0, j);
}

template <typename T>
MLCD_INLINE T SumLanes(const T (&lanes)[kLanes]) {
  T total = 0;
  for (T v : lanes) total += v;
  return total;
}

// Moments about the provisional mean m0 = sum(x)/n (corrected two-pass): with d = x - m0,
// mean = m0 + sum(d)/n and var = sum(d^2)/n - (sum(d)/n)^2. The output subtracts m0 and the
// small correction separately, so a mean far larger than the spread loses nothing to the
// rounding of mean itself.
template <typename T>
MLCD_INLINE void LayerNormForwardRow(const T* x, const T* gamma, const T* beta, T* y, T* mean_out,
                                     T* rstd_out, int64_t n, T eps) {
  const T inv_n = T(1) / static_cast<T>(n);
  T sum[kLanes] = {};
  ForLanes(n, [&](int l, int64_t j) { sum[l] += x[j]; });
  const T m0 = SumLanes(sum) * inv_n;
  T s1[kLanes] = {}, s2[kLanes] = {};
  ForLanes(n, [&](int l, int64_t j) {
    const T d = x[j] - m0;
    s1[l] += d;
    s2[l] += d * d;
  });
  const T shift = SumLanes(s1) * inv_n;
  const T var = std::max(SumLanes(s2) * inv_n - shift * shift, T(0));
  const T rstd = T(1) / std::sqrt(var + eps);
  for (int64_t j = 0; j < n; ++j) y[j] = ((x[j] - m0) - shift) * rstd * gamma[j] + beta[j];
  *mean_out = m0 + shift;
  *rstd_out = rstd;
}

// With g = dy * gamma and xhat = (x - mean) * rstd:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dgamma += dy * xhat,  dbeta += dy.
// The row is centred on the saved mean and then by the mean of what is left (the saved
// mean's rounding), as in the forward pass. Null outputs are skipped.
template <typename T>
MLCD_INLINE void LayerNormBackwardRow(const T* x, const T* gamma, T mean, T rstd, const T* dy,
                                      T* dx, T* dgamma, T* dbeta, int64_t n) {
  const T inv_n = T(1) / static_cast<T>(n);
  T sum_d[kLanes] = {}, sum_g[kLanes] = {}, sum_gd[kLanes] = {};
  ForLanes(n, [&](int l, int64_t j) {
    const T d = x[j] - mean;
    const T g = dy[j] * gamma[j];
    sum_d[l] += d;
    sum_g[l] += g;
    sum_gd[l] += g * d;
  });
  const T shift = SumLanes(sum_d) * inv_n;  // x - true mean = (x - mean) - shift
  const T mean_g = SumLanes(sum_g) * inv_n;
  // xhat * mean(g * xhat) = (x - true mean) * coef
  const T coef = (SumLanes(sum_gd) * inv_n - shift * mean_g) * rstd * rstd;
  if (dx)
    for (int64_t j = 0; j < n; ++j)
      dx[j] = rstd * (dy[j] * gamma[j] - mean_g - ((x[j] - mean) - shift) * coef);
  if (dgamma)
    for (int64_t j = 0; j < n; ++j) dgamma[j] += dy[j] * (((x[j] - mean) - shift) * rstd);
  if (dbeta)
    for (int64_t j = 0; j < n; ++j) dbeta[j] += dy[j];
}

template <typename T>
MLCD_INLINE void LayerNormForwardRows(const T* x, const T* gamma, const T* beta, T* y, T* mean,
                                      T* rstd, int64_t cols, int64_t begin, int64_t end, T eps) {
  for (int64_t r = begin; r < end; ++r)
    LayerNormForwardRow<T>(x + r * cols, gamma, beta, y + r * cols, mean + r, rstd + r, cols, eps);
}

template <typename T>
MLCD_INLINE void LayerNormBackwardRows(const T* x, const T* gamma, const T* mean, const T* rstd,
                                       const T* dy, T* dx, T* dgamma, T* dbeta, int64_t cols,
                                       int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r)
    LayerNormBackwardRow<T>(x + r * cols, gamma, mean[r], rstd[r], dy + r * cols,
                            dx ? dx + r * cols : nullptr, dgamma, dbeta, cols);
}

MLCD_CLONES void LayerNormForwardRowsF(const float* x, const float* gamma, const float* beta,
                                       float* y, float* mean, float* rstd, int64_t cols,
                                       int64_t begin, int64_t end, float eps) {
  LayerNormForwardRows<float>(x, gamma, beta, y, mean, rstd, cols, begin, end, eps);
}

MLCD_CLONES void LayerNormBackwardRowsF(const float* x, const float* gamma, const float* mean,
                                        const float* rstd, const float* dy, float* dx,
                                        float* dgamma, float* dbeta, int64_t cols, int64_t begin,
                                        int64_t end) {
  LayerNormBackwardRows<float>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, cols, begin, end);
}

// Rows per parallel task: about 16k elements.
int64_t LayerNormGrain(int64_t cols) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols));
}

// Runs rows(begin, end, dgamma, dbeta) over blocks of rows fixed by the shape alone (at most
// 64 blocks of at least LayerNormGrain rows), each block adding its parameter gradients into
// a zeroed slot of its own; the slots are then summed in block order and added to
// grad_gamma / grad_beta, so the sums do not depend on the thread count.
template <typename T, typename Rows>
void LayerNormBackwardBlocks(T* grad_gamma, T* grad_beta, int64_t rows, int64_t cols,
                             Rows rows_fn) {
  const int64_t per_block = std::max<int64_t>(LayerNormGrain(cols), (rows + 63) / 64);
  const int64_t blocks = (rows + per_block - 1) / per_block;
  const bool params = grad_gamma || grad_beta;
  std::vector<T> slots(params ? static_cast<size_t>(blocks * 2 * cols) : 0, T(0));
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      T* slot = params ? slots.data() + b * 2 * cols : nullptr;
      rows_fn(b * per_block, std::min(rows, (b + 1) * per_block), grad_gamma ? slot : nullptr,
              grad_beta ? slot + cols : nullptr);
    }
  });
  if (!params || blocks == 0) return;
  T* total = slots.data();
  for (int64_t b = 1; b < blocks; ++b) {
    const T* slot = slots.data() + b * 2 * cols;
    for (int64_t j = 0; j < 2 * cols; ++j) total[j] += slot[j];
  }
  for (int64_t j = 0; j < cols; ++j) {
    if (grad_gamma) grad_gamma[j] += total[j];
    if (grad_beta) grad_beta[j] += total[cols + j];
  }
}

// ---- bias / residual fill ----------------------------------------------------------------

MLCD_CLONES void FillBiasResidualRange(const float* bias, const float* residual, int64_t cols,
                                       int64_t begin, int64_t end, float* out) {
  for (int64_t i = begin; i < end; ++i) {
    float* o = out + i * cols;
    if (residual) {
      const float* r = residual + i * cols;
      for (int64_t j = 0; j < cols; ++j) o[j] = r[j] + bias[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) o[j] = bias[j];
    }
  }
}

// ---- column sums ------------------------------------------------------------------------

MLCD_CLONES void ColumnSumRange(const float* x, int64_t rows, int64_t cols, int64_t begin,
                                int64_t end, float* out) {
  // Rows summed into a local accumulator of the column range (vectorised over columns), so
  // the output is read and written once per range.
  const int64_t width = end - begin;
  std::vector<float> acc(static_cast<size_t>(width), 0.0f);
  float* a = acc.data();
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x + i * cols + begin;
    for (int64_t j = 0; j < width; ++j) a[j] += row[j];
  }
  for (int64_t j = 0; j < width; ++j) out[begin + j] += a[j];
}

// ---- AdamW ------------------------------------------------------------------------------

MLCD_CLONES void AdamWRange(float* param, const float* grad, float* m, float* v, int64_t begin,
                            int64_t end, float decay_factor, float b1, float b2, float step_size,
                            float inv_sqrt_bc2, float eps, float grad_scale) {
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = b1 * m[i] + one_minus_b1 * g;
    const float vi = b2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    param[i] = param[i] * decay_factor - step_size * mi / denom;
  }
}

MLCD_CLONES double SumOfSquaresRange(const float* x, int64_t begin, int64_t end) {
  // Blocks of float partial sums (vectorisable), accumulated in double.
  // 16 float lanes per block of 4096 (vectorisable without reassociation), summed in double.
  double total = 0;
  int64_t i = begin;
  while (i < end) {
    const int64_t stop = std::min(end, i + 4096);
    float lanes[16] = {0};
    for (; i + 16 <= stop; i += 16)
      for (int l = 0; l < 16; ++l) lanes[l] += x[i + l] * x[i + l];
    for (; i < stop; ++i) lanes[0] += x[i] * x[i];
    for (float lane : lanes) total += lane;
  }
  return total;
}

}  // namespace

void AttentionForward(const float* qkv, float* out, float* probs, int64_t batch, int64_t tokens,
                      int64_t heads, int64_t head_dim, float scale) {
  const AttentionShape s{batch, tokens, heads, head_dim};
  at::parallel_for(0, batch * heads, AttentionGrain(s), [&](int64_t begin, int64_t end) {
    if (probs != nullptr) {
      AttentionForwardRangeF(qkv, out, probs, s, begin, end, scale);
    } else {
      AttentionInferenceRangeF(qkv, out, s, begin, end, scale);
    }
  });
}

void AttentionForward(const double* qkv, double* out, double* probs, int64_t batch, int64_t tokens,
                      int64_t heads, int64_t head_dim, double scale) {
  const AttentionShape s{batch, tokens, heads, head_dim};
  at::parallel_for(0, batch * heads, AttentionGrain(s), [&](int64_t begin, int64_t end) {
    auto& scratch = ThreadScratch<double>();
    scratch.Reserve(tokens, head_dim);
    for (int64_t bh = begin; bh < end; ++bh) {
      if (probs != nullptr) {
        AttentionForwardOne<double, true>(qkv, out, probs, s, bh, scale, scratch);
      } else {
        AttentionForwardOne<double, false>(qkv, out, nullptr, s, bh, scale, scratch);
      }
    }
  });
}

void AttentionBackward(const float* qkv, const float* probs, const float* grad_out, float* grad_qkv,
                       int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim,
                       float scale) {
  const AttentionShape s{batch, tokens, heads, head_dim};
  at::parallel_for(0, batch * heads, AttentionGrain(s), [&](int64_t begin, int64_t end) {
    AttentionBackwardRangeF(qkv, probs, grad_out, grad_qkv, s, begin, end, scale);
  });
}

void AttentionBackward(const double* qkv, const double* probs, const double* grad_out,
                       double* grad_qkv, int64_t batch, int64_t tokens, int64_t heads,
                       int64_t head_dim, double scale) {
  const AttentionShape s{batch, tokens, heads, head_dim};
  at::parallel_for(0, batch * heads, AttentionGrain(s), [&](int64_t begin, int64_t end) {
    auto& scratch = ThreadScratch<double>();
    scratch.Reserve(tokens, head_dim);
    for (int64_t bh = begin; bh < end; ++bh)
      AttentionBackwardOne<double>(qkv, probs, grad_out, grad_qkv, s, bh, scale, scratch);
  });
}

void GeluForward(const float* x, float* y, float* dydx, int64_t n) {
  at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
    if (dydx != nullptr) {
      GeluRange(x, y, dydx, begin, end);
    } else {
      GeluInferenceRange(x, y, begin, end);
    }
  });
}

void QuickGeluForward(const float* x, float* y, float* dydx, int64_t n) {
  at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
    if (dydx != nullptr) {
      QuickGeluRange(x, y, dydx, begin, end);
    } else {
      QuickGeluInferenceRange(x, y, begin, end);
    }
  });
}

void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int64_t rows, int64_t cols, float eps) {
  at::parallel_for(0, rows, LayerNormGrain(cols), [&](int64_t begin, int64_t end) {
    LayerNormForwardRowsF(x, gamma, beta, y, mean, rstd, cols, begin, end, eps);
  });
}

void LayerNormForward(const double* x, const double* gamma, const double* beta, double* y,
                      double* mean, double* rstd, int64_t rows, int64_t cols, double eps) {
  at::parallel_for(0, rows, LayerNormGrain(cols), [&](int64_t begin, int64_t end) {
    LayerNormForwardRows<double>(x, gamma, beta, y, mean, rstd, cols, begin, end, eps);
  });
}

void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                       const float* grad_y, float* grad_x, float* grad_gamma, float* grad_beta,
                       int64_t rows, int64_t cols) {
  LayerNormBackwardBlocks(
      grad_gamma, grad_beta, rows, cols, [&](int64_t begin, int64_t end, float* dg, float* db) {
        LayerNormBackwardRowsF(x, gamma, mean, rstd, grad_y, grad_x, dg, db, cols, begin, end);
      });
}

void LayerNormBackward(const double* x, const double* gamma, const double* mean, const double* rstd,
                       const double* grad_y, double* grad_x, double* grad_gamma, double* grad_beta,
                       int64_t rows, int64_t cols) {
  LayerNormBackwardBlocks(grad_gamma, grad_beta, rows, cols,
                          [&](int64_t begin, int64_t end, double* dg, double* db) {
                            LayerNormBackwardRows<double>(x, gamma, mean, rstd, grad_y, grad_x, dg,
                                                          db, cols, begin, end);
                          });
}

void AdamWUpdate(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamWHyper& hyper) {
  const double bc1 =
      1.0 - std::pow(static_cast<double>(hyper.beta1), static_cast<double>(hyper.step));
  const double bc2 =
      1.0 - std::pow(static_cast<double>(hyper.beta2), static_cast<double>(hyper.step));
  const float step_size = static_cast<float>(hyper.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay_factor = 1.0f - hyper.lr * hyper.weight_decay;
  at::parallel_for(0, n, 65536, [&](int64_t begin, int64_t end) {
    AdamWRange(param, grad, exp_avg, exp_avg_sq, begin, end, decay_factor, hyper.beta1, hyper.beta2,
               step_size, inv_sqrt_bc2, hyper.eps, hyper.grad_scale);
  });
}

void FillBiasResidual(const float* bias, const float* residual, int64_t rows, int64_t cols,
                      float* out) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    FillBiasResidualRange(bias, residual, cols, begin, end, out);
  });
}

void AddColumnSums(const float* x, int64_t rows, int64_t cols, float* out) {
  // Column ranges of at least 64 floats per task.
  at::parallel_for(0, cols, 64, [&](int64_t begin, int64_t end) {
    ColumnSumRange(x, rows, cols, begin, end, out);
  });
}

double SumOfSquares(const float* x, int64_t n) {
  if (n <= 0) return 0;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(64, n / 65536));
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  const int64_t per = (n + chunks - 1) / chunks;
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t lo = c * per, hi = std::min(n, lo + per);
      if (lo < hi) partial[static_cast<size_t>(c)] = SumOfSquaresRange(x, lo, hi);
    }
  });
  double total = 0;
  for (double p : partial) total += p;  // fixed order: deterministic for a given n
  return total;
}

}  // namespace mlcd::worker::kernels
