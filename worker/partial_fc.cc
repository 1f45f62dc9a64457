#include "worker/partial_fc.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/file_util.h"
#include "common/npy.h"

namespace mlcd::worker {

namespace {

constexpr double kNormEps = 1e-12;  // as F.normalize
// Above this, exp(-2U) would underflow double; the layer then finds the shifts with an
// extra MAX allreduce instead of using the analytic bound U.
constexpr double kMaxBoundShift = 340.0;
constexpr double kInf = std::numeric_limits<double>::infinity();

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Limits the OpenMP threads of the calling thread (omp_set_num_threads acts on the calling
// thread's ICV, which ATen's parallel_for reads) for a scope. libgomp comes with libtorch and is
// looked up at run time, so the worker need not link OpenMP itself.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) {
    using SetFn = void (*)(int);
    using GetFn = int (*)();
    static SetFn set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    static GetFn get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (threads <= 0 || set == nullptr || get == nullptr) return;
    saved_ = get();
    set_ = set;
    if (saved_ != threads) set(threads);
  }
  ~ScopedOmpThreads() {
    if (set_ != nullptr) set_(saved_);
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  void (*set_)(int) = nullptr;
  int saved_ = 0;
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A small counter-based generator for the per-step draw.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return SplitMix64(state_);
  }
  // Uniform in [0, n) (Lemire's multiply-shift; bias < n / 2^64).
  int64_t Below(int64_t n) {
    return static_cast<int64_t>(
        (static_cast<unsigned __int128>(Next()) * static_cast<uint64_t>(n)) >> 64);
  }

 private:
  uint64_t state_;
};

// Row `cls` of the initial centres: N(0, std²) entries from a hash of (seed, class id, dim).
void FillInitialRow(uint64_t seed, int64_t cls, double std_dev, float* out, int64_t dim) {
  const uint64_t row_key =
      SplitMix64(SplitMix64(seed ^ 0x6D6C6364ull) ^ static_cast<uint64_t>(cls));
  const double two_pi = 2.0 * M_PI;
  for (int64_t j = 0; j < dim; j += 2) {
    uint64_t h = SplitMix64(row_key + static_cast<uint64_t>(j));
    double u1 = (static_cast<double>(h >> 32) + 0.5) * 0x1p-32;  // (0, 1)
    double u2 = static_cast<double>(h & 0xffffffffull) * 0x1p-32;
    double radius = std::sqrt(-2.0 * std::log(u1)) * std_dev;
    out[j] = static_cast<float>(radius * std::cos(two_pi * u2));
    if (j + 1 < dim) out[j + 1] = static_cast<float>(radius * std::sin(two_pi * u2));
  }
}

// ceil(r * n) without the rounding noise of r * n (0.1 * 100000 must be 10000).
int64_t SampleBudget(double ratio, int64_t n) {
  double x = ratio * static_cast<double>(n);
  double rounded = std::round(x);
  int64_t budget = std::fabs(x - rounded) <= 1e-9 * std::max(1.0, x)
                       ? static_cast<int64_t>(rounded)
                       : static_cast<int64_t>(std::ceil(x));
  return std::min<int64_t>(std::max<int64_t>(budget, 0), n);
}

std::string ShapeString(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

bool IsIntegerType(at::ScalarType t) { return t == at::kLong || t == at::kInt; }

std::string RangeFilePrefix(const ClassRange& r) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "class_centres.%012lld-%012lld", static_cast<long long>(r.begin),
                static_cast<long long>(r.end));
  return buf;
}

// Backward of x̂ = x / max(|x|, eps) for rows: (g − x̂ (x̂·g)) / max(|x|, eps).
at::Tensor NormalizeBackward(const at::Tensor& g, const at::Tensor& x_hat,
                             const at::Tensor& norms) {
  at::Tensor dot = (g * x_hat).sum(1, /*keepdim=*/true);
  return (g - x_hat * dot) / norms.unsqueeze(1);
}

}  // namespace

StatusOr<LossVariant> ParseLossVariant(const std::string& name) {
  if (name == "mlcd") return LossVariant::kMlcd;
  if (name == "mlc") return LossVariant::kMlc;
  if (name == "softmax") return LossVariant::kSoftmax;
  return Status::InvalidArgument("unknown loss variant '" + name +
                                 "'; expected mlcd, mlc or softmax");
}

StatusOr<MarginType> ParseMarginType(const std::string& name) {
  if (name == "arc") return MarginType::kArc;
  if (name == "cos") return MarginType::kCos;
  if (name == "none") return MarginType::kNone;
  return Status::InvalidArgument("unknown margin type '" + name + "'; expected arc, cos or none");
}

const char* LossVariantName(LossVariant variant) {
  switch (variant) {
    case LossVariant::kMlcd:
      return "mlcd";
    case LossVariant::kMlc:
      return "mlc";
    case LossVariant::kSoftmax:
      return "softmax";
  }
  return "?";
}

const char* MarginTypeName(MarginType type) {
  switch (type) {
    case MarginType::kArc:
      return "arc";
    case MarginType::kCos:
      return "cos";
    case MarginType::kNone:
      return "none";
  }
  return "?";
}

ClassRange ShardClassRange(int64_t num_classes, int world_size, int rank) {
  ClassRange r;
  if (world_size <= 0 || num_classes <= 0) return r;
  auto bound = [&](int64_t q) {
    return static_cast<int64_t>((static_cast<__int128>(num_classes) * q) / world_size);
  };
  r.begin = bound(rank);
  r.end = bound(rank + 1);
  return r;
}

Status ValidatePartialFcOptions(const PartialFcOptions& o) {
  auto bad = [](const std::string& m) {
    return Status::InvalidArgument("PartialFc options: " + m);
  };
  if (o.num_classes < 1)
    return bad("num_classes must be >= 1, got " + std::to_string(o.num_classes));
  if (o.embedding_dim < 1)
    return bad("embedding_dim must be >= 1, got " + std::to_string(o.embedding_dim));
  if (!(o.sample_ratio > 0.0 && o.sample_ratio <= 1.0)) {
    return bad("sample_ratio must be in (0, 1], got " + std::to_string(o.sample_ratio));
  }
  if (!(o.scale > 0.0) || !std::isfinite(o.scale))
    return bad("scale must be a positive number, got " + std::to_string(o.scale));
  if (!std::isfinite(o.margin)) return bad("margin must be finite");
  if (!(o.init_std > 0.0) || !std::isfinite(o.init_std)) return bad("init_std must be positive");
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0))
    return bad("beta1 must be in [0, 1), got " + std::to_string(o.beta1));
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0))
    return bad("beta2 must be in [0, 1), got " + std::to_string(o.beta2));
  if (!(o.eps > 0.0)) return bad("eps must be > 0, got " + std::to_string(o.eps));
  if (o.compute_threads < 0)
    return bad("compute_threads must be >= 0, got " + std::to_string(o.compute_threads));
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    return bad("weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
  }
  return Status::Ok();
}

struct PartialFc::Impl {
  PartialFcOptions options;
  Collectives* comm = nullptr;
  ClassRange range;
  int64_t dim = 0;
  at::Tensor weight;      // [n, D] float32
  at::Tensor exp_avg;     // [n, D] float32
  at::Tensor exp_avg_sq;  // [n, D] float32
  at::Tensor row_steps;   // [n] int64
  int64_t step = 0;
  // Pending gradient of the last ForwardBackward.
  bool pending = false;
  at::Tensor pending_rows;  // int64 [m], local row indices, sorted
  at::Tensor pending_grad;  // float32 [m, D]
  // Scratch: position of a local class in the sampled set, -1 when not sampled.
  std::vector<int32_t> position;
  double collective_seconds = 0;

  Status Timed(const std::function<Status()>& body) {
    auto t0 = Clock::now();
    Status s = body();
    collective_seconds += Seconds(t0, Clock::now());
    return s;
  }

  double MarginLogit(double c) const {
    const double s = options.scale, m = options.margin;
    switch (options.margin_type) {
      case MarginType::kArc:
        return s * std::cos(std::acos(c) + m);
      case MarginType::kCos:
        return s * (c - m);
      case MarginType::kNone:
        return s * c;
    }
    return s * c;
  }

  StatusOr<PartialFcStep> Step(const at::Tensor& local_embeddings, const at::Tensor& local_labels,
                               const at::Tensor* negatives);
};

PartialFc::PartialFc(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PartialFc::~PartialFc() = default;

StatusOr<std::unique_ptr<PartialFc>> PartialFc::Create(const PartialFcOptions& options,
                                                       Collectives* comm) {
  MLCD_RETURN_IF_ERROR(ValidatePartialFcOptions(options));
  if (comm == nullptr)
    return Status::InvalidArgument(
        "PartialFc needs a Collectives (Collectives::Local() for one process)");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->comm = comm;
  impl->dim = options.embedding_dim;
  impl->range = ShardClassRange(options.num_classes, comm->world_size(), comm->rank());
  const int64_t n = impl->range.size(), dim = impl->dim;
  if (n > std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument("a shard of " + std::to_string(n) +
                                   " classes is too large; use more ranks");
  }
  impl->weight = at::empty({n, dim}, at::kFloat);
  float* w = impl->weight.data_ptr<float>();
  const int64_t begin = impl->range.begin;
  at::parallel_for(0, n, 256, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      FillInitialRow(options.seed, begin + r, options.init_std, w + r * dim, dim);
  });
  impl->exp_avg = at::zeros({n, dim}, at::kFloat);
  impl->exp_avg_sq = at::zeros({n, dim}, at::kFloat);
  impl->row_steps = at::zeros({n}, at::kLong);
  impl->position.assign(static_cast<size_t>(n), -1);
  return std::unique_ptr<PartialFc>(new PartialFc(std::move(impl)));
}

StatusOr<PartialFcStep> PartialFc::ForwardBackward(const at::Tensor& local_embeddings,
                                                   const at::Tensor& local_labels) {
  return impl_->Step(local_embeddings, local_labels, nullptr);
}

StatusOr<PartialFcStep> PartialFc::ForwardBackwardWithNegatives(const at::Tensor& local_embeddings,
                                                                const at::Tensor& local_labels,
                                                                const at::Tensor& negatives) {
  return impl_->Step(local_embeddings, local_labels, &negatives);
}

StatusOr<PartialFcStep> PartialFc::Impl::Step(const at::Tensor& emb_in, const at::Tensor& labels_in,
                                              const at::Tensor* negatives_in) {
  const auto t_start = Clock::now();
  ScopedOmpThreads omp_threads(options.compute_threads);
  collective_seconds = 0;
  pending = false;
  pending_rows = at::Tensor();
  pending_grad = at::Tensor();
  const int world = comm->world_size(), rank = comm->rank();
  const int64_t K = options.num_classes, D = dim;
  const double s = options.scale;
  const LossVariant variant = options.variant;

  // ---- 1. Local checks, exchanged so that every rank takes the same decision.
  std::string local_error;
  int64_t b_local = 0, width = 0;
  if (!emb_in.defined() || emb_in.dim() != 2 || emb_in.scalar_type() != at::kFloat ||
      !emb_in.device().is_cpu()) {
    local_error =
        "embeddings must be a 2-d float32 CPU tensor [B_local, D], got " + ShapeString(emb_in);
  } else if (emb_in.size(1) != D) {
    local_error = "embeddings have dimension " + std::to_string(emb_in.size(1)) +
                  " but the layer's embedding_dim is " + std::to_string(D);
  } else if (!labels_in.defined() || (labels_in.dim() != 2 && labels_in.dim() != 1) ||
             !IsIntegerType(labels_in.scalar_type()) || !labels_in.device().is_cpu()) {
    local_error =
        "labels must be an int64 (or int32) CPU tensor [B_local, l], got " + ShapeString(labels_in);
  } else if (labels_in.size(0) != emb_in.size(0)) {
    local_error = "labels have " + std::to_string(labels_in.size(0)) +
                  " rows but embeddings have " + std::to_string(emb_in.size(0));
  } else {
    b_local = emb_in.size(0);
    width = labels_in.dim() == 2 ? labels_in.size(1) : 1;
  }
  at::Tensor negatives;
  if (local_error.empty() && negatives_in != nullptr) {
    const at::Tensor& ng = *negatives_in;
    if (!ng.defined() || ng.dim() != 1 || !IsIntegerType(ng.scalar_type())) {
      local_error = "negatives must be a 1-d int64 tensor of class ids, got " + ShapeString(ng);
    } else {
      negatives = ng.to(at::kLong).contiguous();
      if (negatives.numel() > 0) {
        int64_t lo = negatives.min().item<int64_t>(), hi = negatives.max().item<int64_t>();
        if (lo < 0 || hi >= K) {
          local_error = "negative class id " + std::to_string(lo < 0 ? lo : hi) +
                        " is outside [0, num_classes=" + std::to_string(K) + ")";
        }
      }
    }
  }
  at::Tensor meta =
      at::tensor(std::vector<int64_t>{b_local, width, local_error.empty() ? 0 : 1}, at::kLong);
  at::Tensor metas;
  MLCD_RETURN_IF_ERROR(Timed([&] { return comm->AllGather(meta, &metas); }));
  std::vector<int64_t> sizes(world), offsets(world + 1, 0);
  {
    auto mv = metas.accessor<int64_t, 1>();
    std::string bad_ranks;
    for (int r = 0; r < world; ++r) {
      if (mv[3 * r + 2] != 0) bad_ranks += (bad_ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!local_error.empty()) return Status::InvalidArgument(local_error);
    if (!bad_ranks.empty()) {
      return Status::InvalidArgument("the step's input was rejected on rank(s) " + bad_ranks +
                                     " (see their error)");
    }
    for (int r = 0; r < world; ++r) {
      if (mv[3 * r + 1] != mv[1]) {
        return Status::InvalidArgument("label width l differs between ranks: rank 0 has " +
                                       std::to_string(mv[1]) + ", rank " + std::to_string(r) +
                                       " has " + std::to_string(mv[3 * r + 1]));
      }
      sizes[r] = mv[3 * r];
      offsets[r + 1] = offsets[r] + sizes[r];
    }
  }
  const int64_t B = offsets[world];
  const int64_t l = width;
  if (B == 0)
    return Status::InvalidArgument("the global batch is empty (every rank passed 0 samples)");
  const int64_t b_max = *std::max_element(sizes.begin(), sizes.end());

  // ---- 2. Allgather embeddings and labels: one collective of packed byte rows.
  at::Tensor emb_local = emb_in.contiguous();
  at::Tensor labels_local = labels_in.to(at::kLong).reshape({b_local, l}).contiguous();
  at::Tensor E, Y;  // [B, D] float32, [B, l] int64
  if (world == 1) {
    E = emb_local;
    Y = labels_local;
  } else {
    const int64_t emb_bytes = D * 4, row_bytes = D * 4 + l * 8;
    at::Tensor packed = at::zeros({b_max, row_bytes}, at::kByte);
    uint8_t* p = packed.data_ptr<uint8_t>();
    const float* ep = emb_local.data_ptr<float>();
    const int64_t* lp = labels_local.data_ptr<int64_t>();
    for (int64_t i = 0; i < b_local; ++i) {
      std::memcpy(p + i * row_bytes, ep + i * D, emb_bytes);
      std::memcpy(p + i * row_bytes + emb_bytes, lp + i * l, l * 8);
    }
    at::Tensor all;
    MLCD_RETURN_IF_ERROR(Timed([&] { return comm->AllGather(packed, &all); }));
    E = at::empty({B, D}, at::kFloat);
    Y = at::empty({B, l}, at::kLong);
    const uint8_t* ap = all.data_ptr<uint8_t>();
    float* Ep = E.data_ptr<float>();
    int64_t* Yp = Y.data_ptr<int64_t>();
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < sizes[r]; ++i) {
        const uint8_t* row = ap + (r * b_max + i) * row_bytes;
        std::memcpy(Ep + (offsets[r] + i) * D, row, emb_bytes);
        std::memcpy(Yp + (offsets[r] + i) * l, row + emb_bytes, l * 8);
      }
    }
  }

  // ---- 3. Labels (checked on global data: same verdict on every rank) and positives.
  const int64_t* Yp = Y.data_ptr<int64_t>();
  // pos_begin[i]..pos_begin[i+1]: the distinct positives of sample i (for softmax: the first
  // label only).
  std::vector<int64_t> pos_begin(B + 1, 0), pos_ids;
  pos_ids.reserve(static_cast<size_t>(B * l));
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t j = 0; j < l; ++j) {
      int64_t c = Yp[i * l + j];
      if (c >= K) {
        int r = static_cast<int>(std::upper_bound(offsets.begin(), offsets.end(), i) -
                                 offsets.begin()) -
                1;
        return Status::InvalidArgument(
            "label " + std::to_string(c) + " of sample " + std::to_string(i - offsets[r]) +
            " on rank " + std::to_string(r) + " (column " + std::to_string(j) +
            ") is >= num_classes " + std::to_string(K) +
            "; labels must be in [0, num_classes) or negative for padding");
      }
      if (c < 0) continue;
      if (variant == LossVariant::kSoftmax && j > 0) continue;
      bool dup = false;
      for (int64_t q = pos_begin[i]; q < static_cast<int64_t>(pos_ids.size()); ++q)
        dup |= pos_ids[q] == c;
      if (!dup) pos_ids.push_back(c);
    }
    pos_begin[i + 1] = static_cast<int64_t>(pos_ids.size());
  }

  // ---- 4. The sampled set of this shard (local row indices, sorted).
  const int64_t n = range.size();
  std::vector<int64_t> sampled;
  auto select = [&](int64_t local) {
    if (position[local] == -1) {
      position[local] = 0;
      sampled.push_back(local);
    }
  };
  for (int64_t q = 0; q < B * l; ++q) {
    int64_t c = Yp[q];
    if (c >= 0 && range.contains(c)) select(c - range.begin);
  }
  if (negatives_in != nullptr) {
    const int64_t* np = negatives.data_ptr<int64_t>();
    for (int64_t q = 0; q < negatives.numel(); ++q) {
      if (range.contains(np[q])) select(np[q] - range.begin);
    }
  } else {
    const int64_t budget = SampleBudget(options.sample_ratio, n);
    const int64_t positives = static_cast<int64_t>(sampled.size());
    if (positives < budget) {
      SampleRng rng(SplitMix64(options.seed ^ 0x5a5a5a5aull) ^
                    SplitMix64(static_cast<uint64_t>(step)) ^
                    SplitMix64(static_cast<uint64_t>(range.begin) + 0x1234567ull));
      const int64_t want = budget - positives, candidates = n - positives;
      if (2 * want <= candidates) {
        // Rejection sampling: at most half of the candidates are taken, so < 2 draws each.
        while (static_cast<int64_t>(sampled.size()) < budget) select(rng.Below(n));
      } else {
        // Selection sampling (Knuth's algorithm S) over the candidates in order.
        int64_t needed = want, left = candidates;
        for (int64_t c = 0; c < n && needed > 0; ++c) {
          if (position[c] != -1) continue;
          if (rng.Below(left) < needed) {
            select(c);
            --needed;
          }
          --left;
        }
      }
    }
  }
  std::sort(sampled.begin(), sampled.end());
  const int64_t m = static_cast<int64_t>(sampled.size());
  // Positive entries of this shard: (sample, column in S, cosine, logit).
  struct PosEntry {
    int64_t i, j;
    double c, z;
  };
  std::vector<PosEntry> pos_entries;

  // The elementwise work runs as a few parallel regions over blocks of samples (ATen ops
  // inside a region run single-threaded and vectorised): many short OpenMP regions between the
  // BLAS calls cost more than the work itself. With compute_threads = 1 they run inline.
  const int64_t num_blocks = std::max<int64_t>(1, std::min<int64_t>(B, 4 * at::get_num_threads()));
  auto block_begin = [&](int64_t k) { return (B * k) / num_blocks; };

  // ---- 5. Normalised rows and the logits of the global batch against the sampled rows.
  at::Tensor rows = at::from_blob(sampled.data(), {m}, at::kLong).clone();
  for (int64_t j = 0; j < m; ++j) position[sampled[j]] = -1;  // scratch clean for the next step
  at::Tensor e_hat = at::empty({B, D}, at::kFloat), e_norm = at::empty({B}, at::kFloat);
  at::Tensor w_hat = at::empty({m, D}, at::kFloat), w_norm = at::empty({m}, at::kFloat);
  at::parallel_for(0, B + m, 64, [&](int64_t b, int64_t e) {
    // Rows [0, B) are embeddings, [B, B + m) sampled centres.
    auto normalize = [](const at::Tensor& x, at::Tensor out, at::Tensor norms) {
      at::Tensor n = x.norm(2, {1}).clamp_min(kNormEps);
      out.copy_(x / n.unsqueeze(1));
      norms.copy_(n);
    };
    int64_t eb = std::min(b, B), ee = std::min(e, B);
    if (ee > eb)
      normalize(E.narrow(0, eb, ee - eb), e_hat.narrow(0, eb, ee - eb),
                e_norm.narrow(0, eb, ee - eb));
    int64_t wb = std::max(b, B) - B, we = std::max(e, B) - B;
    if (we > wb) {
      normalize(weight.index_select(0, rows.narrow(0, wb, we - wb)), w_hat.narrow(0, wb, we - wb),
                w_norm.narrow(0, wb, we - wb));
    }
  });
  at::Tensor C = at::mm(e_hat, w_hat.t());  // [B, m]; becomes z, then exp(z - row max), then dL/dc
  float* Zp = C.data_ptr<float>();
  // |<e, w>| > 1 before the clamp (rounding): zero gradient there, as the clamp's derivative.
  at::Tensor over = at::empty({B, m}, at::kBool);
  std::vector<char> block_over(num_blocks, 0);
  std::vector<double> block_cos(num_blocks, 0.0);
  // Per positive slot q (indexing pos_ids): column in S, cosine, logit; j = -1 when the class
  // is not in this shard.
  std::vector<int64_t> slot_j(pos_ids.size(), -1);
  std::vector<double> slot_c(pos_ids.size(), 0.0), slot_z(pos_ids.size(), 0.0);
  at::Tensor row_max = at::zeros({B}, at::kFloat);
  at::Tensor row_sum = at::zeros({B}, at::kDouble);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (m > 0) {
    at::parallel_for(0, num_blocks, 1, [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) {
        const int64_t b = block_begin(k), n_rows = block_begin(k + 1) - b;
        if (n_rows == 0) continue;
        at::Tensor Cb = C.narrow(0, b, n_rows);
        auto minmax = at::aminmax(Cb);
        if (std::get<0>(minmax).item<float>() < -1.0f || std::get<1>(minmax).item<float>() > 1.0f) {
          over.narrow(0, b, n_rows).copy_(Cb.abs().gt(1.0));
          block_over[k] = 1;
          Cb.clamp_(-1.0, 1.0);
        }
        block_cos[k] = Cb.sum(at::kDouble).item<double>();
        for (int64_t i = b; i < b + n_rows; ++i) {
          for (int64_t q = pos_begin[i]; q < pos_begin[i + 1]; ++q) {
            const int64_t c = pos_ids[q];
            if (!range.contains(c)) continue;
            const int64_t j =
                std::lower_bound(sampled.begin(), sampled.end(), c - range.begin) - sampled.begin();
            slot_j[q] = j;
            slot_c[q] = Zp[i * m + j];
            slot_z[q] = MarginLogit(slot_c[q]);
          }
        }
        Cb.mul_(s);
        for (int64_t i = b; i < b + n_rows; ++i) {
          for (int64_t q = pos_begin[i]; q < pos_begin[i + 1]; ++q) {
            if (slot_j[q] < 0) continue;
            Zp[i * m + slot_j[q]] =
                variant == LossVariant::kSoftmax ? static_cast<float>(slot_z[q]) : neg_inf;
          }
        }
        // Row maxima over this shard's terms (the negatives; for softmax all of S).
        at::Tensor mx = std::get<0>(Cb.max(1));
        mx.masked_fill_(at::isinf(mx), 0.0);
        Cb.sub_(mx.unsqueeze(1)).exp_();
        row_max.narrow(0, b, n_rows).copy_(mx);
        row_sum.narrow(0, b, n_rows).copy_(Cb.sum({1}, false, at::kDouble));
      }
    });
  }
  double cos_total = 0;
  for (double v : block_cos) cos_total += v;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t q = pos_begin[i]; q < pos_begin[i + 1]; ++q) {
      if (slot_j[q] >= 0) pos_entries.push_back({i, slot_j[q], slot_c[q], slot_z[q]});
    }
  }
  double pos_cos_local = 0;
  for (const PosEntry& pe : pos_entries) pos_cos_local += pe.c;
  const float* mxp = row_max.data_ptr<float>();
  const double* rsp = row_sum.data_ptr<double>();

  // Per-sample shifts: the analytic bound U on |logit| (no communication), or, for huge
  // scales, global per-sample maxima from a MAX allreduce.
  const double U = s * (1.0 + std::fabs(options.margin));
  std::vector<double> shift_a(B, U),
      shift_b(B, U);  // term a: negatives / all of S; term b: positives
  if (U > kMaxBoundShift) {
    at::Tensor maxima = at::full({2 * B}, -kInf, at::kDouble);
    double* xp = maxima.data_ptr<double>();
    for (int64_t i = 0; i < B; ++i) {
      if (rsp[i] > 0) xp[i] = mxp[i];
    }
    if (variant != LossVariant::kSoftmax) {
      for (const PosEntry& pe : pos_entries) xp[B + pe.i] = std::max(xp[B + pe.i], -pe.z);
    }
    MLCD_RETURN_IF_ERROR(Timed([&] { return comm->AllReduce(maxima, ReduceOp::kMax); }));
    for (int64_t i = 0; i < B; ++i) {
      // MLCD's "1 +" is the term exp(0): include 0 in its maximum.
      double floor_a = variant == LossVariant::kMlcd ? 0.0 : -kInf;
      shift_a[i] = std::max(xp[i], floor_a);
      shift_b[i] = std::max(xp[B + i], floor_a);
      if (!std::isfinite(shift_a[i])) shift_a[i] = 0;
      if (!std::isfinite(shift_b[i])) shift_b[i] = 0;
    }
  }

  // ---- 6. One fused SUM allreduce: per-sample shifted exp-sums (a: negatives or all of S;
  // b: positives, or the target logit for softmax) and the statistics.
  int64_t pos_pairs_local = static_cast<int64_t>(pos_entries.size());
  at::Tensor red = at::zeros({2 * B + 5}, at::kDouble);
  double* rp = red.data_ptr<double>();
  for (int64_t i = 0; i < B; ++i)
    rp[i] = rsp[i] > 0 ? rsp[i] * std::exp(static_cast<double>(mxp[i]) - shift_a[i]) : 0.0;
  for (const PosEntry& pe : pos_entries) {
    if (variant == LossVariant::kSoftmax) {
      rp[B + pe.i] += pe.z;
    } else {
      rp[B + pe.i] += std::exp(-pe.z - shift_b[pe.i]);
    }
  }
  rp[2 * B + 0] = pos_cos_local;
  rp[2 * B + 1] = static_cast<double>(pos_pairs_local);
  rp[2 * B + 2] = cos_total - pos_cos_local;
  rp[2 * B + 3] = static_cast<double>(B * m - pos_pairs_local);
  rp[2 * B + 4] = static_cast<double>(m);
  MLCD_RETURN_IF_ERROR(Timed([&] { return comm->AllReduce(red, ReduceOp::kSum); }));

  // ---- 7. Loss and the per-sample factors of the logit gradients (identical on all ranks).
  // dL/dz_ij = neg_factor[i] * exp(z_ij - row_max_i) for the shard's "a" terms; positives get
  // pos_scale[i] * exp(-z_ip) style terms below.
  std::vector<double> neg_factor(B, 0.0), pos_log(B, 0.0), pos_coef(B, 0.0);
  double loss_sum = 0;
  for (int64_t i = 0; i < B; ++i) {
    const double a = rp[i], b = rp[B + i];
    switch (variant) {
      case LossVariant::kMlcd: {
        double ln = shift_a[i] + std::log(std::exp(-shift_a[i]) + a);  // log(1 + Σ_n e^{z_n})
        double lp = shift_b[i] + std::log(std::exp(-shift_b[i]) + b);  // log(1 + Σ_p e^{-z_p})
        loss_sum += ln + lp;
        neg_factor[i] = std::exp(static_cast<double>(mxp[i]) - ln);
        pos_log[i] = lp;  // dL/dz_p = -exp(-z_p - lp)
        pos_coef[i] = 1.0;
        break;
      }
      case LossVariant::kMlc: {
        if (a > 0 && b > 0) {
          double log_n = shift_a[i] + std::log(a), log_p = shift_b[i] + std::log(b);
          double u = log_n + log_p;
          loss_sum += u > 0 ? u + std::log1p(std::exp(-u)) : std::log1p(std::exp(u));
          double sigma = 1.0 / (1.0 + std::exp(-u));
          neg_factor[i] = sigma * std::exp(static_cast<double>(mxp[i]) - log_n);
          pos_log[i] = log_p;  // dL/dz_p = -sigma * exp(-z_p - log_p)
          pos_coef[i] = sigma;
        }
        break;
      }
      case LossVariant::kSoftmax: {
        if (Yp[i * l] >= 0 && a > 0) {
          double lse = shift_a[i] + std::log(a);
          loss_sum += lse - b;  // b = the target's logit
          neg_factor[i] = std::exp(static_cast<double>(mxp[i]) - lse);
          pos_coef[i] = 1.0;  // dL/dz_t = softmax_t - 1
        }
        break;
      }
    }
  }
  PartialFcStats stats;
  stats.loss = loss_sum / static_cast<double>(B);
  stats.global_batch_size = B;
  stats.positive_pairs = static_cast<int64_t>(std::llround(rp[2 * B + 1]));
  stats.negative_pairs = static_cast<int64_t>(std::llround(rp[2 * B + 3]));
  stats.mean_positive_cosine = stats.positive_pairs > 0 ? rp[2 * B + 0] / rp[2 * B + 1] : 0.0;
  stats.mean_negative_cosine = stats.negative_pairs > 0 ? rp[2 * B + 2] / rp[2 * B + 3] : 0.0;
  stats.sampled_classes = static_cast<int64_t>(std::llround(rp[2 * B + 4]));
  if (!std::isfinite(stats.loss)) {
    return Status::InvalidArgument("the loss is not finite (" + std::to_string(stats.loss) +
                                   "): non-finite embeddings or class centres");
  }

  // ---- 8. dL/dc (PartialFC's margin convention: dz/dc = s for every logit), mean over B.
  const double g_scale = s / static_cast<double>(B);
  at::Tensor factor = at::empty({B}, at::kFloat);
  float* fp = factor.data_ptr<float>();
  for (int64_t i = 0; i < B; ++i) fp[i] = static_cast<float>(neg_factor[i] * g_scale);
  if (m > 0) {
    at::parallel_for(0, num_blocks, 1, [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) {
        const int64_t b = block_begin(k), n_rows = block_begin(k + 1) - b;
        if (n_rows == 0) continue;
        at::Tensor Gb = C.narrow(0, b, n_rows);
        Gb.mul_(factor.narrow(0, b, n_rows).unsqueeze(1));
        for (int64_t i = b; i < b + n_rows; ++i) {
          for (int64_t q = pos_begin[i]; q < pos_begin[i + 1]; ++q) {
            if (slot_j[q] < 0) continue;
            float& g = Zp[i * m + slot_j[q]];
            if (variant == LossVariant::kSoftmax) {
              if (pos_coef[i] != 0.0) g -= static_cast<float>(g_scale);
            } else {
              g = static_cast<float>(-pos_coef[i] * std::exp(-slot_z[q] - pos_log[i]) * g_scale);
            }
          }
        }
        if (block_over[k]) Gb.masked_fill_(over.narrow(0, b, n_rows), 0.0);
      }
    });
  }

  // ---- 9. Backward GEMMs; the embedding gradient goes back to its owner.
  at::Tensor grad_e_hat = at::mm(C, w_hat);      // [B, D]
  at::Tensor grad_w_hat = at::mm(C.t(), e_hat);  // [m, D]
  at::Tensor grad_local_hat;
  if (world == 1) {
    grad_local_hat = grad_e_hat;
  } else {
    at::Tensor padded = at::zeros({world * b_max, D}, at::kFloat);
    for (int r = 0; r < world; ++r) {
      if (sizes[r] > 0)
        padded.narrow(0, r * b_max, sizes[r]).copy_(grad_e_hat.narrow(0, offsets[r], sizes[r]));
    }
    at::Tensor mine;
    MLCD_RETURN_IF_ERROR(Timed([&] { return comm->ReduceScatter(padded, &mine); }));
    grad_local_hat = mine.narrow(0, 0, b_local);
  }
  // Through the normalisations: rows [0, b_local) are this rank's embeddings, then the centres.
  at::Tensor local_norm = e_norm.narrow(0, offsets[rank], b_local);
  at::Tensor local_hat = e_hat.narrow(0, offsets[rank], b_local);
  at::Tensor grad_embeddings = at::empty({b_local, D}, at::kFloat);
  at::Tensor grad_w = at::empty({m, D}, at::kFloat);
  at::parallel_for(0, b_local + m, 64, [&](int64_t b, int64_t e) {
    int64_t eb = std::min(b, b_local), ee = std::min(e, b_local);
    if (ee > eb) {
      grad_embeddings.narrow(0, eb, ee - eb)
          .copy_(NormalizeBackward(grad_local_hat.narrow(0, eb, ee - eb),
                                   local_hat.narrow(0, eb, ee - eb),
                                   local_norm.narrow(0, eb, ee - eb)));
    }
    int64_t wb = std::max(b, b_local) - b_local, we = std::max(e, b_local) - b_local;
    if (we > wb) {
      grad_w.narrow(0, wb, we - wb)
          .copy_(NormalizeBackward(grad_w_hat.narrow(0, wb, we - wb), w_hat.narrow(0, wb, we - wb),
                                   w_norm.narrow(0, wb, we - wb)));
    }
  });
  PartialFcStep result;
  result.grad_embeddings = grad_embeddings;
  pending_rows = rows;
  pending_grad = grad_w;
  pending = true;

  result.loss = stats.loss;
  result.stats = stats;
  result.collective_seconds = collective_seconds;
  result.compute_seconds = Seconds(t_start, Clock::now()) - collective_seconds;
  return result;
}

Status PartialFc::OptimizerStep(double lr) {
  Impl& im = *impl_;
  if (!im.pending) {
    return Status::FailedPrecondition(
        "PartialFc::OptimizerStep without a pending gradient: call ForwardBackward first (each "
        "gradient is applied once)");
  }
  if (!(lr >= 0.0) || !std::isfinite(lr))
    return Status::InvalidArgument("learning rate must be finite and >= 0");
  const int64_t m = im.pending_rows.numel(), D = im.dim;
  const int64_t* rows = im.pending_rows.data_ptr<int64_t>();
  const float* grad = im.pending_grad.data_ptr<float>();
  float* w = im.weight.data_ptr<float>();
  float* m1 = im.exp_avg.data_ptr<float>();
  float* m2 = im.exp_avg_sq.data_ptr<float>();
  int64_t* steps = im.row_steps.data_ptr<int64_t>();
  const PartialFcOptions& o = im.options;
  const float beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - o.beta1),
              one_minus_b2 = static_cast<float>(1.0 - o.beta2);
  const float decay = static_cast<float>(1.0 - lr * o.weight_decay),
              eps = static_cast<float>(o.eps);
  at::parallel_for(0, m, 16, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t r = rows[k];
      const int64_t t = ++steps[r];
      const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
      const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
      const float step_size = static_cast<float>(lr / bias1);
      const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
      float* __restrict wr = w + r * D;
      float* __restrict ar = m1 + r * D;
      float* __restrict vr = m2 + r * D;
      const float* __restrict gr = grad + k * D;
      for (int64_t d = 0; d < D; ++d) {
        const float g = gr[d];
        const float a = beta1 * ar[d] + one_minus_b1 * g;
        const float v = beta2 * vr[d] + one_minus_b2 * g * g;
        ar[d] = a;
        vr[d] = v;
        wr[d] = wr[d] * decay - step_size * a / (std::sqrt(v) * inv_sqrt_bias2 + eps);
      }
    }
  });
  im.step += 1;
  DiscardGradient();
  return Status::Ok();
}

void PartialFc::DiscardGradient() {
  impl_->pending = false;
  impl_->pending_rows = at::Tensor();
  impl_->pending_grad = at::Tensor();
}

bool PartialFc::has_pending_gradient() const { return impl_->pending; }

at::Tensor PartialFc::last_sampled_classes() const {
  if (!impl_->pending) return at::Tensor();
  return impl_->pending_rows + impl_->range.begin;
}

at::Tensor PartialFc::last_weight_gradient() const {
  return impl_->pending ? impl_->pending_grad : at::Tensor();
}

ClassRange PartialFc::class_range() const { return impl_->range; }
const PartialFcOptions& PartialFc::options() const { return impl_->options; }
int64_t PartialFc::step() const { return impl_->step; }
at::Tensor PartialFc::weight() const { return impl_->weight; }

PartialFcShardState PartialFc::ExportState() const {
  PartialFcShardState st;
  st.range = impl_->range;
  st.num_classes = impl_->options.num_classes;
  st.embedding_dim = impl_->dim;
  st.step = impl_->step;
  st.weight = impl_->weight;
  st.exp_avg = impl_->exp_avg;
  st.exp_avg_sq = impl_->exp_avg_sq;
  st.row_steps = impl_->row_steps;
  return st;
}

Status PartialFc::ImportState(const std::vector<PartialFcShardState>& pieces) {
  Impl& im = *impl_;
  const ClassRange mine = im.range;
  const int64_t D = im.dim;
  std::vector<std::pair<int64_t, int64_t>> covered;
  int64_t step = -1;
  for (size_t q = 0; q < pieces.size(); ++q) {
    const PartialFcShardState& p = pieces[q];
    std::string name =
        "state piece [" + std::to_string(p.range.begin) + ", " + std::to_string(p.range.end) + ")";
    if (p.num_classes != im.options.num_classes || p.embedding_dim != D) {
      return Status::InvalidArgument(
          name + " is for " + std::to_string(p.num_classes) + " classes of dimension " +
          std::to_string(p.embedding_dim) + " but this layer has " +
          std::to_string(im.options.num_classes) + " of dimension " + std::to_string(D));
    }
    if (p.range.begin < 0 || p.range.end > p.num_classes || p.range.begin > p.range.end) {
      return Status::InvalidArgument(name + " is not a valid class range of " +
                                     std::to_string(p.num_classes));
    }
    if (step >= 0 && p.step != step) {
      return Status::InvalidArgument("state pieces disagree on the step: " + std::to_string(step) +
                                     " vs " + std::to_string(p.step) + " (" + name +
                                     "); they come from different checkpoints");
    }
    step = p.step;
    auto check = [&](const at::Tensor& t, at::ScalarType type, std::vector<int64_t> shape,
                     const char* what, bool optional) -> Status {
      if (!t.defined() && optional) return Status::Ok();
      if (!t.defined() || t.scalar_type() != type || t.sizes().vec() != shape) {
        return Status::InvalidArgument(name + ": " + what + " must be " + c10::toString(type) +
                                       " of shape [" + std::to_string(shape[0]) +
                                       (shape.size() > 1 ? ", " + std::to_string(D) : "") +
                                       "], got " + ShapeString(t));
      }
      return Status::Ok();
    };
    const int64_t rows = p.range.size();
    MLCD_RETURN_IF_ERROR(check(p.weight, at::kFloat, {rows, D}, "weight", false));
    MLCD_RETURN_IF_ERROR(check(p.exp_avg, at::kFloat, {rows, D}, "exp_avg", true));
    MLCD_RETURN_IF_ERROR(check(p.exp_avg_sq, at::kFloat, {rows, D}, "exp_avg_sq", true));
    MLCD_RETURN_IF_ERROR(check(p.row_steps, at::kLong, {rows}, "row_steps", true));
    int64_t b = std::max(p.range.begin, mine.begin), e = std::min(p.range.end, mine.end);
    if (b < e) covered.emplace_back(b, e);
  }
  std::sort(covered.begin(), covered.end());
  int64_t reach = mine.begin;
  for (const auto& iv : covered) {
    if (iv.first > reach) break;
    reach = std::max(reach, iv.second);
  }
  if (reach < mine.end) {
    return Status::InvalidArgument(
        "the state pieces do not cover this shard's classes [" + std::to_string(mine.begin) + ", " +
        std::to_string(mine.end) + "): class " + std::to_string(reach) +
        " is missing (a checkpoint written by fewer ranks than it had?)");
  }
  for (const PartialFcShardState& p : pieces) {
    int64_t b = std::max(p.range.begin, mine.begin), e = std::min(p.range.end, mine.end);
    if (b >= e) continue;
    int64_t dst = b - mine.begin, src = b - p.range.begin, len = e - b;
    im.weight.narrow(0, dst, len).copy_(p.weight.narrow(0, src, len));
    if (p.exp_avg.defined()) {
      im.exp_avg.narrow(0, dst, len).copy_(p.exp_avg.narrow(0, src, len));
    } else {
      im.exp_avg.narrow(0, dst, len).zero_();
    }
    if (p.exp_avg_sq.defined()) {
      im.exp_avg_sq.narrow(0, dst, len).copy_(p.exp_avg_sq.narrow(0, src, len));
    } else {
      im.exp_avg_sq.narrow(0, dst, len).zero_();
    }
    if (p.row_steps.defined()) {
      im.row_steps.narrow(0, dst, len).copy_(p.row_steps.narrow(0, src, len));
    } else {
      im.row_steps.narrow(0, dst, len).zero_();
    }
  }
  if (step >= 0) im.step = step;
  DiscardGradient();
  return Status::Ok();
}

Status PartialFc::Save(const std::string& dir) const {
  const Impl& im = *impl_;
  if (!IsDirectory(dir))
    return Status::NotFound("checkpoint directory '" + dir + "' does not exist");
  const std::string prefix = dir + "/" + RangeFilePrefix(im.range);
  const int64_t n = im.range.size(), D = im.dim;
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".weight.npy", NpyDtype::kFloat32, {n, D}, im.weight.data_ptr()));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".exp_avg.npy", NpyDtype::kFloat32, {n, D}, im.exp_avg.data_ptr()));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".exp_avg_sq.npy", NpyDtype::kFloat32, {n, D}, im.exp_avg_sq.data_ptr()));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".row_steps.npy", NpyDtype::kInt64, {n}, im.row_steps.data_ptr()));
  nlohmann::json meta = {
      {"num_classes", im.options.num_classes},
      {"embedding_dim", D},
      {"step", im.step},
      {"begin", im.range.begin},
      {"end", im.range.end},
      {"variant", LossVariantName(im.options.variant)},
      {"margin_type", MarginTypeName(im.options.margin_type)},
      {"scale", im.options.scale},
      {"margin", im.options.margin},
      {"sample_ratio", im.options.sample_ratio},
      {"seed", im.options.seed},
  };
  return WriteFileAtomically(prefix + ".json", meta.dump(2) + "\n");
}

Status PartialFc::Load(const std::string& dir) {
  Impl& im = *impl_;
  if (!IsDirectory(dir))
    return Status::NotFound("checkpoint directory '" + dir + "' does not exist");
  static const std::regex kMetaName(R"(class_centres\.(\d+)-(\d+)\.json)");
  std::vector<std::string> metas;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, kMetaName)) metas.push_back(name);
  }
  if (ec)
    return Status::Unavailable("cannot list checkpoint directory '" + dir + "': " + ec.message());
  if (metas.empty()) {
    return Status::NotFound("checkpoint directory '" + dir +
                            "' has no class_centres.<begin>-<end>.json files");
  }
  std::sort(metas.begin(), metas.end());
  std::vector<MappedNpy> maps;
  maps.reserve(metas.size() * 4);
  std::vector<PartialFcShardState> pieces;
  int64_t common_step = -1;
  for (const std::string& name : metas) {
    const std::string path = dir + "/" + name;
    MLCD_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    nlohmann::json meta = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (meta.is_discarded() || !meta.is_object() || !meta.contains("num_classes") ||
        !meta.contains("embedding_dim") || !meta.contains("step") || !meta.contains("begin") ||
        !meta.contains("end")) {
      return Status::DataLoss(path + " is not a valid class-centre shard description");
    }
    PartialFcShardState p;
    p.num_classes = meta["num_classes"].get<int64_t>();
    p.embedding_dim = meta["embedding_dim"].get<int64_t>();
    p.step = meta["step"].get<int64_t>();
    p.range = {meta["begin"].get<int64_t>(), meta["end"].get<int64_t>()};
    if (common_step >= 0 && p.step != common_step) {
      return Status::InvalidArgument(
          path + " is at step " + std::to_string(p.step) + " but other ranges are at step " +
          std::to_string(common_step) + "; the directory mixes checkpoints");
    }
    common_step = p.step;
    if (p.num_classes != im.options.num_classes || p.embedding_dim != im.dim) {
      return Status::InvalidArgument(path + " holds centres of " + std::to_string(p.num_classes) +
                                     " classes, dimension " + std::to_string(p.embedding_dim) +
                                     "; this layer has " + std::to_string(im.options.num_classes) +
                                     ", dimension " + std::to_string(im.dim));
    }
    bool overlaps = std::max(p.range.begin, im.range.begin) < std::min(p.range.end, im.range.end);
    if (overlaps) {
      const std::string prefix = dir + "/" + RangeFilePrefix(p.range);
      auto open = [&](const char* suffix, NpyDtype dtype, at::ScalarType type,
                      bool two_d) -> StatusOr<at::Tensor> {
        MLCD_ASSIGN_OR_RETURN(MappedNpy map, MappedNpy::Open(prefix + suffix));
        const NpyHeader& h = map.header();
        std::vector<int64_t> want = two_d ? std::vector<int64_t>{p.range.size(), p.embedding_dim}
                                          : std::vector<int64_t>{p.range.size()};
        if (h.dtype != dtype || h.shape != want) {
          return Status::DataLoss(map.path() +
                                  " does not have the dtype and shape its .json describes");
        }
        at::Tensor t = at::from_blob(const_cast<void*>(map.data()), want, type);
        maps.push_back(std::move(map));
        return t;
      };
      MLCD_ASSIGN_OR_RETURN(p.weight, open(".weight.npy", NpyDtype::kFloat32, at::kFloat, true));
      MLCD_ASSIGN_OR_RETURN(p.exp_avg, open(".exp_avg.npy", NpyDtype::kFloat32, at::kFloat, true));
      MLCD_ASSIGN_OR_RETURN(p.exp_avg_sq,
                            open(".exp_avg_sq.npy", NpyDtype::kFloat32, at::kFloat, true));
      MLCD_ASSIGN_OR_RETURN(p.row_steps,
                            open(".row_steps.npy", NpyDtype::kInt64, at::kLong, false));
      pieces.push_back(std::move(p));
    }
  }
  Status s = ImportState(pieces);
  if (!s.ok()) return s.WithContext("loading class centres from '" + dir + "'");
  im.step = common_step;  // also for a shard that owns no class (no piece overlaps it)
  return s;
}

}  // namespace mlcd::worker
