// PartialFc's ForwardBackward as named stages (the order and what each does:
// worker/loss/partial_fc_impl.h; the algorithm: docs/loss.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/blas_env.h"
#include "common/random.h"
#include "common/stopwatch.h"
#include "worker/loss/partial_fc_impl.h"
#include "worker/loss/partial_fc_state.h"

namespace mlcd::worker {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using Clock = std::chrono::steady_clock;

// ceil(r * n) without the rounding noise of r * n (0.1 * 100000 must be 10000).
int64_t SampleBudget(double ratio, int64_t n) {
  double x = ratio * static_cast<double>(n);
  double rounded = std::round(x);
  int64_t budget = std::fabs(x - rounded) <= 1e-9 * std::max(1.0, x)
                       ? static_cast<int64_t>(rounded)
                       : static_cast<int64_t>(std::ceil(x));
  return std::min<int64_t>(std::max<int64_t>(budget, 0), n);
}

bool IsIntegerType(at::ScalarType t) { return t == at::kLong || t == at::kInt; }

// The local input checks of one step; empty when the input is fine. Sets *b_local, *width
// and *negatives when it is.
std::string CheckLocalInput(const at::Tensor& emb_in, const at::Tensor& labels_in,
                            const at::Tensor* negatives_in, int64_t D, int64_t K,
                            c10::Device device, int64_t* b_local, int64_t* width,
                            at::Tensor* negatives) {
  if (!emb_in.defined() || emb_in.dim() != 2 || emb_in.scalar_type() != at::kFloat ||
      emb_in.device() != device) {
    return "embeddings must be a 2-d float32 tensor [B_local, D] on the layer's device " +
           device.str() + ", got " + TensorShapeString(emb_in) +
           (emb_in.defined() ? " on " + emb_in.device().str() : "");
  }
  if (emb_in.size(1) != D) {
    return "embeddings have dimension " + std::to_string(emb_in.size(1)) +
           " but the layer's embedding_dim is " + std::to_string(D);
  }
  if (!labels_in.defined() || (labels_in.dim() != 2 && labels_in.dim() != 1) ||
      !IsIntegerType(labels_in.scalar_type()) || !labels_in.device().is_cpu()) {
    return "labels must be an int64 (or int32) CPU tensor [B_local, l], got " +
           TensorShapeString(labels_in);
  }
  if (labels_in.size(0) != emb_in.size(0)) {
    return "labels have " + std::to_string(labels_in.size(0)) + " rows but embeddings have " +
           std::to_string(emb_in.size(0));
  }
  *b_local = emb_in.size(0);
  *width = labels_in.dim() == 2 ? labels_in.size(1) : 1;
  if (negatives_in == nullptr) return "";
  const at::Tensor& ng = *negatives_in;
  if (!ng.defined() || ng.dim() != 1 || !IsIntegerType(ng.scalar_type())) {
    return "negatives must be a 1-d int64 tensor of class ids, got " + TensorShapeString(ng);
  }
  *negatives = ng.to(at::kLong).cpu().contiguous();
  if (negatives->numel() > 0) {
    int64_t lo = negatives->min().item<int64_t>(), hi = negatives->max().item<int64_t>();
    if (lo < 0 || hi >= K) {
      return "negative class id " + std::to_string(lo < 0 ? lo : hi) +
             " is outside [0, num_classes=" + std::to_string(K) + ")";
    }
  }
  return "";
}

}  // namespace

at::Tensor NormalizeRowsBackward(const at::Tensor& g, const at::Tensor& x_hat,
                                 const at::Tensor& norms) {
  at::Tensor dot = (g * x_hat).sum(1, /*keepdim=*/true);
  return (g - x_hat * dot) / norms.unsqueeze(1);
}

Status PartialFc::Impl::Timed(const std::function<Status()>& body) {
  auto t0 = Clock::now();
  Status s = body();
  collective_seconds += SecondsBetween(t0, Clock::now());
  return s;
}

double PartialFc::Impl::MarginLogit(double c) const {
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

StatusOr<PartialFcStep> PartialFc::Impl::Step(const at::Tensor& emb_in, const at::Tensor& labels_in,
                                              const at::Tensor* negatives_in) {
  const auto t_start = Clock::now();
  ScopedOmpThreads omp_threads(options.compute_threads);
  collective_seconds = 0;
  pending = false;
  pending_rows = at::Tensor();
  pending_grad = at::Tensor();

  PartialFcStepState st;
  MLCD_RETURN_IF_ERROR(ExchangeShapes(emb_in, labels_in, negatives_in, &st));
  MLCD_RETURN_IF_ERROR(GatherBatch(emb_in, labels_in, &st));
  MLCD_RETURN_IF_ERROR(CollectPositives(&st));
  SampleClasses(negatives_in != nullptr, &st);
  st.num_blocks = std::max<int64_t>(1, std::min<int64_t>(st.B, 4 * at::get_num_threads()));
  NormalizeRows(&st);
  ComputeLogits(&st);
  MLCD_RETURN_IF_ERROR(FindShifts(&st));
  MLCD_RETURN_IF_ERROR(ReduceSums(&st));
  MLCD_ASSIGN_OR_RETURN(PartialFcStats stats, LossAndFactors(&st));
  LogitGradients(&st);
  PartialFcStep result;
  at::Tensor grad_w;
  MLCD_RETURN_IF_ERROR(Backward(&st, &result.grad_embeddings, &grad_w));
  pending_rows = st.rows;
  pending_grad = grad_w;
  pending = true;

  result.loss = stats.loss;
  result.stats = stats;
  result.collective_seconds = collective_seconds;
  result.compute_seconds = SecondsBetween(t_start, Clock::now()) - collective_seconds;
  return result;
}

// Local checks, exchanged so that every rank takes the same decision.
Status PartialFc::Impl::ExchangeShapes(const at::Tensor& emb_in, const at::Tensor& labels_in,
                                       const at::Tensor* negatives_in, PartialFcStepState* st) {
  const int world = comm->world_size();
  int64_t b_local = 0, width = 0;
  const std::string local_error =
      CheckLocalInput(emb_in, labels_in, negatives_in, dim, options.num_classes, options.device,
                      &b_local, &width, &st->negatives);
  // On the collectives' device (NCCL moves CUDA tensors only), read back on the host.
  at::Tensor meta =
      at::tensor(std::vector<int64_t>{b_local, width, local_error.empty() ? 0 : 1}, at::kLong)
          .to(comm->device());
  at::Tensor metas;
  MLCD_RETURN_IF_ERROR(Timed([&] { return comm->AllGather(meta, &metas); }));
  metas = metas.cpu();
  st->sizes.assign(world, 0);
  st->offsets.assign(world + 1, 0);
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
    st->sizes[r] = mv[3 * r];
    st->offsets[r + 1] = st->offsets[r] + st->sizes[r];
  }
  st->b_local = b_local;
  st->l = width;
  st->B = st->offsets[world];
  if (st->B == 0)
    return Status::InvalidArgument("the global batch is empty (every rank passed 0 samples)");
  st->b_max = *std::max_element(st->sizes.begin(), st->sizes.end());
  return Status::Ok();
}

// Allgather embeddings and labels: one collective of packed byte rows.
Status PartialFc::Impl::GatherBatch(const at::Tensor& emb_in, const at::Tensor& labels_in,
                                    PartialFcStepState* st) {
  const int world = comm->world_size();
  const int64_t D = dim, l = st->l, b_local = st->b_local, b_max = st->b_max, B = st->B;
  at::Tensor emb_local = emb_in.contiguous();
  at::Tensor labels_local = labels_in.to(at::kLong).reshape({b_local, l}).contiguous();
  if (world == 1) {
    st->E = emb_local;
    st->Y = labels_local;
    return Status::Ok();
  }
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
  st->E = at::empty({B, D}, at::kFloat);
  st->Y = at::empty({B, l}, at::kLong);
  const uint8_t* ap = all.data_ptr<uint8_t>();
  float* Ep = st->E.data_ptr<float>();
  int64_t* Yp = st->Y.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < st->sizes[r]; ++i) {
      const uint8_t* row = ap + (r * b_max + i) * row_bytes;
      std::memcpy(Ep + (st->offsets[r] + i) * D, row, emb_bytes);
      std::memcpy(Yp + (st->offsets[r] + i) * l, row + emb_bytes, l * 8);
    }
  }
  return Status::Ok();
}

// Labels (checked on global data: same verdict on every rank) and positives.
Status PartialFc::Impl::CollectPositives(PartialFcStepState* st) const {
  const int64_t K = options.num_classes, B = st->B, l = st->l;
  const int64_t* Yp = st->Y.data_ptr<int64_t>();
  const std::vector<int64_t>& offsets = st->offsets;
  std::vector<int64_t>& pos_begin = st->pos_begin;
  std::vector<int64_t>& pos_ids = st->pos_ids;
  pos_begin.assign(B + 1, 0);
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
      if (options.variant == LossVariant::kSoftmax && j > 0) continue;
      bool dup = false;
      for (int64_t q = pos_begin[i]; q < static_cast<int64_t>(pos_ids.size()); ++q)
        dup |= pos_ids[q] == c;
      if (!dup) pos_ids.push_back(c);
    }
    pos_begin[i + 1] = static_cast<int64_t>(pos_ids.size());
  }
  return Status::Ok();
}

// The sampled set of this shard (local row indices, sorted): every label of the global batch
// in the shard, then the given negatives or uniformly drawn others up to the budget.
void PartialFc::Impl::SampleClasses(bool given_negatives, PartialFcStepState* st) {
  const int64_t n = range.size();
  const int64_t* Yp = st->Y.data_ptr<int64_t>();
  std::vector<int64_t>& sampled = st->sampled;
  auto select = [&](int64_t local) {
    if (position[local] == -1) {
      position[local] = 0;
      sampled.push_back(local);
    }
  };
  for (int64_t q = 0; q < st->B * st->l; ++q) {
    int64_t c = Yp[q];
    if (c >= 0 && range.contains(c)) select(c - range.begin);
  }
  if (given_negatives) {
    const int64_t* np = st->negatives.data_ptr<int64_t>();
    for (int64_t q = 0; q < st->negatives.numel(); ++q) {
      if (range.contains(np[q])) select(np[q] - range.begin);
    }
  } else {
    const int64_t budget = SampleBudget(options.sample_ratio, n);
    const int64_t positives = static_cast<int64_t>(sampled.size());
    if (positives < budget) {
      // One multiply-shift per draw (BelowFast): a fixed draw count per candidate. The stream
      // starts one gamma past the key (draw i is SplitMix64(key + i·gamma), as it always was).
      const uint64_t key = SplitMix64(options.seed ^ 0x5a5a5a5aull) ^
                           SplitMix64(static_cast<uint64_t>(step)) ^
                           SplitMix64(static_cast<uint64_t>(range.begin) + 0x1234567ull);
      SplitMix rng(key + 0x9E3779B97F4A7C15ull);
      auto below = [&](int64_t bound) {
        return static_cast<int64_t>(rng.BelowFast(static_cast<uint64_t>(bound)));
      };
      const int64_t want = budget - positives, candidates = n - positives;
      if (2 * want <= candidates) {
        // Rejection sampling: at most half of the candidates are taken, so < 2 draws each.
        while (static_cast<int64_t>(sampled.size()) < budget) select(below(n));
      } else {
        // Selection sampling (Knuth's algorithm S) over the candidates in order.
        int64_t needed = want, left = candidates;
        for (int64_t c = 0; c < n && needed > 0; ++c) {
          if (position[c] != -1) continue;
          if (below(left) < needed) {
            select(c);
            --needed;
          }
          --left;
        }
      }
    }
  }
  std::sort(sampled.begin(), sampled.end());
  st->m = static_cast<int64_t>(sampled.size());
  st->rows = at::from_blob(sampled.data(), {st->m}, at::kLong).clone();
  for (int64_t j = 0; j < st->m; ++j) position[sampled[j]] = -1;  // scratch clean for next step
}

// Normalised rows of the global batch and of the sampled centres.
void PartialFc::Impl::NormalizeRows(PartialFcStepState* st) const {
  const int64_t B = st->B, m = st->m, D = dim;
  st->e_hat = at::empty({B, D}, at::kFloat);
  st->e_norm = at::empty({B}, at::kFloat);
  st->w_hat = at::empty({m, D}, at::kFloat);
  st->w_norm = at::empty({m}, at::kFloat);
  at::parallel_for(0, B + m, 64, [&](int64_t b, int64_t e) {
    // Rows [0, B) are embeddings, [B, B + m) sampled centres.
    auto normalize = [](const at::Tensor& x, at::Tensor out, at::Tensor norms) {
      at::Tensor n = x.norm(2, {1}).clamp_min(kNormEps);
      out.copy_(x / n.unsqueeze(1));
      norms.copy_(n);
    };
    int64_t eb = std::min(b, B), ee = std::min(e, B);
    if (ee > eb)
      normalize(st->E.narrow(0, eb, ee - eb), st->e_hat.narrow(0, eb, ee - eb),
                st->e_norm.narrow(0, eb, ee - eb));
    int64_t wb = std::max(b, B) - B, we = std::max(e, B) - B;
    if (we > wb) {
      normalize(weight.index_select(0, st->rows.narrow(0, wb, we - wb)),
                st->w_hat.narrow(0, wb, we - wb), st->w_norm.narrow(0, wb, we - wb));
    }
  });
}

// The logits of the global batch against the sampled rows: per block of samples, clamp the
// cosines, note the positives' cosines and margin logits, scale, mask the positives (all but
// softmax), and leave exp(z - row max) with the row maxima and sums.
void PartialFc::Impl::ComputeLogits(PartialFcStepState* st) const {
  const int64_t B = st->B, m = st->m, num_blocks = st->num_blocks;
  const double s = options.scale;
  const LossVariant variant = options.variant;
  const std::vector<int64_t>& pos_begin = st->pos_begin;
  const std::vector<int64_t>& pos_ids = st->pos_ids;
  const std::vector<int64_t>& sampled = st->sampled;
  st->C = at::mm(st->e_hat, st->w_hat.t());  // [B, m]
  float* Zp = st->C.data_ptr<float>();
  st->over = at::empty({B, m}, at::kBool);
  st->block_over.assign(num_blocks, 0);
  st->block_cos.assign(num_blocks, 0.0);
  st->slot_j.assign(pos_ids.size(), -1);
  st->slot_c.assign(pos_ids.size(), 0.0);
  st->slot_z.assign(pos_ids.size(), 0.0);
  st->row_max = at::zeros({B}, at::kFloat);
  st->row_sum = at::zeros({B}, at::kDouble);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (m > 0) {
    at::parallel_for(0, num_blocks, 1, [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) {
        const int64_t b = st->block_begin(k), n_rows = st->block_begin(k + 1) - b;
        if (n_rows == 0) continue;
        at::Tensor Cb = st->C.narrow(0, b, n_rows);
        auto minmax = at::aminmax(Cb);
        if (std::get<0>(minmax).item<float>() < -1.0f || std::get<1>(minmax).item<float>() > 1.0f) {
          st->over.narrow(0, b, n_rows).copy_(Cb.abs().gt(1.0));
          st->block_over[k] = 1;
          Cb.clamp_(-1.0, 1.0);
        }
        st->block_cos[k] = Cb.sum(at::kDouble).item<double>();
        for (int64_t i = b; i < b + n_rows; ++i) {
          for (int64_t q = pos_begin[i]; q < pos_begin[i + 1]; ++q) {
            const int64_t c = pos_ids[q];
            if (!range.contains(c)) continue;
            const int64_t j =
                std::lower_bound(sampled.begin(), sampled.end(), c - range.begin) - sampled.begin();
            st->slot_j[q] = j;
            st->slot_c[q] = Zp[i * m + j];
            st->slot_z[q] = MarginLogit(st->slot_c[q]);
          }
        }
        Cb.mul_(s);
        for (int64_t i = b; i < b + n_rows; ++i) {
          for (int64_t q = pos_begin[i]; q < pos_begin[i + 1]; ++q) {
            if (st->slot_j[q] < 0) continue;
            Zp[i * m + st->slot_j[q]] =
                variant == LossVariant::kSoftmax ? static_cast<float>(st->slot_z[q]) : neg_inf;
          }
        }
        // Row maxima over this shard's terms (the negatives; for softmax all of S).
        at::Tensor mx = std::get<0>(Cb.max(1));
        mx.masked_fill_(at::isinf(mx), 0.0);
        Cb.sub_(mx.unsqueeze(1)).exp_();
        st->row_max.narrow(0, b, n_rows).copy_(mx);
        st->row_sum.narrow(0, b, n_rows).copy_(Cb.sum({1}, false, at::kDouble));
      }
    });
  }
  st->cos_total = 0;
  for (double v : st->block_cos) st->cos_total += v;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t q = pos_begin[i]; q < pos_begin[i + 1]; ++q) {
      if (st->slot_j[q] >= 0)
        st->pos_entries.push_back({i, st->slot_j[q], st->slot_c[q], st->slot_z[q]});
    }
  }
  st->pos_cos_local = 0;
  for (const PartialFcStepState::PosEntry& pe : st->pos_entries) st->pos_cos_local += pe.c;
}

// Per-sample shifts: the analytic bound U on |logit| (no communication), or, for huge
// scales, global per-sample maxima from a MAX allreduce.
Status PartialFc::Impl::FindShifts(PartialFcStepState* st) {
  const int64_t B = st->B;
  const LossVariant variant = options.variant;
  const double U = options.scale * (1.0 + std::fabs(options.margin));
  st->shift_a.assign(B, U);
  st->shift_b.assign(B, U);
  if (U <= kMaxBoundShift) return Status::Ok();
  const float* mxp = st->row_max.data_ptr<float>();
  const double* rsp = st->row_sum.data_ptr<double>();
  at::Tensor maxima = at::full({2 * B}, -kInf, at::kDouble);
  double* xp = maxima.data_ptr<double>();
  for (int64_t i = 0; i < B; ++i) {
    if (rsp[i] > 0) xp[i] = mxp[i];
  }
  if (variant != LossVariant::kSoftmax) {
    for (const auto& pe : st->pos_entries) xp[B + pe.i] = std::max(xp[B + pe.i], -pe.z);
  }
  MLCD_RETURN_IF_ERROR(Timed([&] { return comm->AllReduce(maxima, ReduceOp::kMax); }));
  for (int64_t i = 0; i < B; ++i) {
    // MLCD's "1 +" is the term exp(0): include 0 in its maximum.
    double floor_a = variant == LossVariant::kMlcd ? 0.0 : -kInf;
    st->shift_a[i] = std::max(xp[i], floor_a);
    st->shift_b[i] = std::max(xp[B + i], floor_a);
    if (!std::isfinite(st->shift_a[i])) st->shift_a[i] = 0;
    if (!std::isfinite(st->shift_b[i])) st->shift_b[i] = 0;
  }
  return Status::Ok();
}

// One fused SUM allreduce: per-sample shifted exp-sums (a: negatives or all of S; b:
// positives, or the target logit for softmax) and the statistics.
Status PartialFc::Impl::ReduceSums(PartialFcStepState* st) {
  const int64_t B = st->B, m = st->m;
  const float* mxp = st->row_max.data_ptr<float>();
  const double* rsp = st->row_sum.data_ptr<double>();
  int64_t pos_pairs_local = static_cast<int64_t>(st->pos_entries.size());
  st->red = at::zeros({2 * B + 5}, at::kDouble);
  double* rp = st->red.data_ptr<double>();
  for (int64_t i = 0; i < B; ++i)
    rp[i] = rsp[i] > 0 ? rsp[i] * std::exp(static_cast<double>(mxp[i]) - st->shift_a[i]) : 0.0;
  for (const auto& pe : st->pos_entries) {
    if (options.variant == LossVariant::kSoftmax) {
      rp[B + pe.i] += pe.z;
    } else {
      rp[B + pe.i] += std::exp(-pe.z - st->shift_b[pe.i]);
    }
  }
  rp[2 * B + 0] = st->pos_cos_local;
  rp[2 * B + 1] = static_cast<double>(pos_pairs_local);
  rp[2 * B + 2] = st->cos_total - st->pos_cos_local;
  rp[2 * B + 3] = static_cast<double>(B * m - pos_pairs_local);
  rp[2 * B + 4] = static_cast<double>(m);
  return Timed([&] { return comm->AllReduce(st->red, ReduceOp::kSum); });
}

// Loss and the per-sample factors of the logit gradients (identical on all ranks).
// dL/dz_ij = neg_factor[i] * exp(z_ij - row_max_i) for the shard's "a" terms; positives get
// pos_coef[i] * exp(-z_ip - pos_log[i]) style terms (LogitGradients).
StatusOr<PartialFcStats> PartialFc::Impl::LossAndFactors(PartialFcStepState* st) const {
  const int64_t B = st->B;
  const float* mxp = st->row_max.data_ptr<float>();
  const double* rp = st->red.data_ptr<double>();
  const int64_t* Yp = st->Y.data_ptr<int64_t>();
  const std::vector<double>& shift_a = st->shift_a;
  const std::vector<double>& shift_b = st->shift_b;
  std::vector<double>& neg_factor = st->neg_factor;
  std::vector<double>& pos_log = st->pos_log;
  std::vector<double>& pos_coef = st->pos_coef;
  neg_factor.assign(B, 0.0);
  pos_log.assign(B, 0.0);
  pos_coef.assign(B, 0.0);
  double loss_sum = 0;
  for (int64_t i = 0; i < B; ++i) {
    const double a = rp[i], b = rp[B + i];
    switch (options.variant) {
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
        if (Yp[i * st->l] >= 0 && a > 0) {
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
  return stats;
}

// dL/dc in place of C (PartialFC's margin convention: dz/dc = s for every logit), mean over B.
void PartialFc::Impl::LogitGradients(PartialFcStepState* st) const {
  const int64_t B = st->B, m = st->m;
  if (m <= 0) return;
  const double g_scale = options.scale / static_cast<double>(B);
  const LossVariant variant = options.variant;
  at::Tensor factor = at::empty({B}, at::kFloat);
  float* fp = factor.data_ptr<float>();
  for (int64_t i = 0; i < B; ++i) fp[i] = static_cast<float>(st->neg_factor[i] * g_scale);
  float* Zp = st->C.data_ptr<float>();
  at::parallel_for(0, st->num_blocks, 1, [&](int64_t kb, int64_t ke) {
    for (int64_t k = kb; k < ke; ++k) {
      const int64_t b = st->block_begin(k), n_rows = st->block_begin(k + 1) - b;
      if (n_rows == 0) continue;
      at::Tensor Gb = st->C.narrow(0, b, n_rows);
      Gb.mul_(factor.narrow(0, b, n_rows).unsqueeze(1));
      for (int64_t i = b; i < b + n_rows; ++i) {
        for (int64_t q = st->pos_begin[i]; q < st->pos_begin[i + 1]; ++q) {
          if (st->slot_j[q] < 0) continue;
          float& g = Zp[i * m + st->slot_j[q]];
          if (variant == LossVariant::kSoftmax) {
            if (st->pos_coef[i] != 0.0) g -= static_cast<float>(g_scale);
          } else {
            g = static_cast<float>(-st->pos_coef[i] * std::exp(-st->slot_z[q] - st->pos_log[i]) *
                                   g_scale);
          }
        }
      }
      if (st->block_over[k]) Gb.masked_fill_(st->over.narrow(0, b, n_rows), 0.0);
    }
  });
}

// Backward GEMMs; the embedding gradient goes back to its owner (ReduceScatter); then through
// the normalisations: this rank's embeddings and the sampled centres.
Status PartialFc::Impl::Backward(PartialFcStepState* st, at::Tensor* grad_embeddings,
                                 at::Tensor* grad_w_out) {
  const int world = comm->world_size(), rank = comm->rank();
  const int64_t b_local = st->b_local, b_max = st->b_max, m = st->m, D = dim;
  at::Tensor grad_e_hat = at::mm(st->C, st->w_hat);      // [B, D]
  at::Tensor grad_w_hat = at::mm(st->C.t(), st->e_hat);  // [m, D]
  at::Tensor grad_local_hat;
  if (world == 1) {
    grad_local_hat = grad_e_hat;
  } else {
    at::Tensor padded = at::zeros({world * b_max, D}, at::kFloat);
    for (int r = 0; r < world; ++r) {
      if (st->sizes[r] > 0)
        padded.narrow(0, r * b_max, st->sizes[r])
            .copy_(grad_e_hat.narrow(0, st->offsets[r], st->sizes[r]));
    }
    at::Tensor mine;
    MLCD_RETURN_IF_ERROR(Timed([&] { return comm->ReduceScatter(padded, &mine); }));
    grad_local_hat = mine.narrow(0, 0, b_local);
  }
  // Rows [0, b_local) are this rank's embeddings, then the centres.
  at::Tensor local_norm = st->e_norm.narrow(0, st->offsets[rank], b_local);
  at::Tensor local_hat = st->e_hat.narrow(0, st->offsets[rank], b_local);
  at::Tensor grad_e = at::empty({b_local, D}, at::kFloat);
  at::Tensor grad_w = at::empty({m, D}, at::kFloat);
  at::parallel_for(0, b_local + m, 64, [&](int64_t b, int64_t e) {
    int64_t eb = std::min(b, b_local), ee = std::min(e, b_local);
    if (ee > eb) {
      grad_e.narrow(0, eb, ee - eb)
          .copy_(NormalizeRowsBackward(grad_local_hat.narrow(0, eb, ee - eb),
                                       local_hat.narrow(0, eb, ee - eb),
                                       local_norm.narrow(0, eb, ee - eb)));
    }
    int64_t wb = std::max(b, b_local) - b_local, we = std::max(e, b_local) - b_local;
    if (we > wb) {
      grad_w.narrow(0, wb, we - wb)
          .copy_(NormalizeRowsBackward(grad_w_hat.narrow(0, wb, we - wb),
                                       st->w_hat.narrow(0, wb, we - wb),
                                       st->w_norm.narrow(0, wb, we - wb)));
    }
  });
  *grad_embeddings = grad_e;
  *grad_w_out = grad_w;
  return Status::Ok();
}

}  // namespace mlcd::worker
