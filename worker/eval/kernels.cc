#include "worker/eval/kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

// Clone the loops for AVX-512 / AVX2 / baseline x86-64 (GCC ifunc dispatch at load time).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLCD_EVAL_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLCD_EVAL_CLONES
#endif

// The 64-byte vector helpers below are always inlined; their ABI never crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mlcd::worker::kernels {
namespace {

// 16 floats; GCC maps the arithmetic onto the widest vectors of the clone being compiled.
typedef float V16 __attribute__((vector_size(64)));

inline __attribute__((always_inline)) V16 Load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline __attribute__((always_inline)) void Store(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }
inline __attribute__((always_inline)) float Sum(V16 v) {
  float s = 0;
  for (int i = 0; i < 16; ++i) s += v[i];
  return s;
}

// z[r][c] = <w_c, x_r> + b[c] for R rows at once (each w_c chunk is loaded once for the R rows).
template <int R>
inline __attribute__((always_inline)) void BlockLogits(const float* x, int64_t dim, const float* w,
                                                       const float* b, int classes, float* z) {
  const int64_t dv = dim / 16 * 16;
  for (int c = 0; c < classes; ++c) {
    const float* wc = w + c * dim;
    V16 acc[R] = {};
    for (int64_t j = 0; j < dv; j += 16) {
      const V16 wv = Load(wc + j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] += wv * Load(x + r * dim + j);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float s = Sum(acc[r]);
      for (int64_t j = dv; j < dim; ++j) s += wc[j] * x[r * dim + j];
      z[r * classes + c] = s + b[c];
    }
  }
}

// acc_w[c] += Σ_r g[r][c] x_r for R rows (each accumulator chunk is loaded and stored once).
template <int R>
inline __attribute__((always_inline)) void BlockOuter(const float* x, int64_t dim, const float* g,
                                                      int classes, float* acc_w) {
  const int64_t dv = dim / 16 * 16;
  for (int c = 0; c < classes; ++c) {
    float* ac = acc_w + c * dim;
    float gc[R];
    for (int r = 0; r < R; ++r) gc[r] = g[r * classes + c];
    for (int64_t j = 0; j < dv; j += 16) {
      V16 a = Load(ac + j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) a += gc[r] * Load(x + r * dim + j);
      Store(ac + j, a);
    }
    for (int64_t j = dv; j < dim; ++j)
      for (int r = 0; r < R; ++r) ac[j] += gc[r] * x[r * dim + j];
  }
}

// Loss (and g = softmax − onehot, in place of z) of R rows.
template <int R>
inline __attribute__((always_inline)) double BlockSoftmax(float* z, const int64_t* y, int classes,
                                                          bool want_g) {
  double loss = 0;
  for (int r = 0; r < R; ++r) {
    float* zr = z + r * classes;
    float m = zr[0];
    for (int c = 1; c < classes; ++c) m = std::max(m, zr[c]);
    const float zy = zr[y[r]];
    double sum = 0;
    for (int c = 0; c < classes; ++c) {
      const float e = std::exp(zr[c] - m);  // in (0, 1]
      sum += e;
      zr[c] = e;
    }
    loss += m + std::log(sum) - static_cast<double>(zy);
    if (want_g) {
      const float inv = static_cast<float>(1.0 / sum);
      for (int c = 0; c < classes; ++c) zr[c] *= inv;
      zr[y[r]] -= 1.0f;
    }
  }
  return loss;
}

constexpr int kBlock = 8;

}  // namespace

void ParallelFor(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(threads, n));
  if (workers == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto loop = [&]() {
    for (int64_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < workers; ++t) pool.emplace_back(loop);
  loop();
  for (auto& t : pool) t.join();
}

MLCD_EVAL_CLONES
double LogisticLossGradRows(const float* x, int64_t dim, const int64_t* y, int64_t begin,
                            int64_t end, const float* w, const float* b, int classes, double scale,
                            double* grad_w, double* grad_b) {
  std::vector<float> z(static_cast<size_t>(kBlock * classes));
  std::vector<float> acc_w, acc_b;
  const bool want_g = grad_w != nullptr;
  if (want_g) {
    acc_w.assign(static_cast<size_t>(classes * dim), 0.0f);
    acc_b.assign(static_cast<size_t>(classes), 0.0f);
  }
  auto flush = [&]() {
    for (size_t k = 0; k < acc_w.size(); ++k) {
      grad_w[k] += scale * acc_w[k];
      acc_w[k] = 0;
    }
    for (int c = 0; c < classes; ++c) {
      grad_b[c] += scale * acc_b[c];
      acc_b[c] = 0;
    }
  };
  double loss = 0;
  int64_t since_flush = 0;
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock) {
    const float* xb = x + i * dim;
    BlockLogits<kBlock>(xb, dim, w, b, classes, z.data());
    loss += BlockSoftmax<kBlock>(z.data(), y + i, classes, want_g);
    if (!want_g) continue;
    BlockOuter<kBlock>(xb, dim, z.data(), classes, acc_w.data());
    for (int r = 0; r < kBlock; ++r)
      for (int c = 0; c < classes; ++c) acc_b[c] += z[r * classes + c];
    if ((since_flush += kBlock) >= 64) {
      flush();
      since_flush = 0;
    }
  }
  for (; i < end; ++i) {
    const float* xi = x + i * dim;
    BlockLogits<1>(xi, dim, w, b, classes, z.data());
    loss += BlockSoftmax<1>(z.data(), y + i, classes, want_g);
    if (!want_g) continue;
    BlockOuter<1>(xi, dim, z.data(), classes, acc_w.data());
    for (int c = 0; c < classes; ++c) acc_b[c] += z[c];
  }
  if (want_g) flush();
  return loss;
}

MLCD_EVAL_CLONES
void LogitsRows(const float* x, int64_t dim, int64_t begin, int64_t end, const float* w,
                const float* b, int classes, float* z) {
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock)
    BlockLogits<kBlock>(x + i * dim, dim, w, b, classes, z + (i - begin) * classes);
  for (; i < end; ++i) BlockLogits<1>(x + i * dim, dim, w, b, classes, z + (i - begin) * classes);
}

}  // namespace mlcd::worker::kernels
