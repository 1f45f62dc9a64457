// The device layer's ForwardBackward (PartialFcLayer::kDevice; contract: partial_fc.h,
// algorithm: docs/loss.md). The host plans exactly as the fused layer does (ExchangeShapes,
// CollectPositives, SampleClasses: the same checks, the same de-duplicated positives, the
// same seeded draws) and sends the plan's index tensors in one copy; everything per row is
// ATen ops created with the embeddings' options, so one code path serves CPU and CUDA. At
// world size 1 the host reads one result per step: the loss with the statistics, at the very
// end. At world size > 1 the plan also reads the exchanged shapes and the gathered labels
// (small tensors, before the GEMMs).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "worker/loss/device_timer.h"
#include "worker/loss/partial_fc_impl.h"
#include "worker/loss/partial_fc_state.h"

namespace mlcd::worker {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kStatistics = 5;  // the reduced statistics after the 2B per-sample sums

// The plan's index tensors on the device: views into one int64 tensor copied in one go.
struct DevicePlan {
  at::Tensor rows;        // [m] local rows of the sampled set S, sorted
  at::Tensor pos_flat;    // [P] i·m + j of this shard's positive entries (sample i, column j)
  at::Tensor pos_i;       // [P] their samples
  at::Tensor target_ok;   // [B] 1 where labels[i][0] >= 0 (softmax's target exists)
  at::Tensor batch_rows;  // [B] row of sample i in the padded all-gather (world > 1)
  int64_t positives = 0;  // P
};

// Everything the device computes in one step.
struct DeviceTerms {
  at::Tensor E;                 // [B, D] the global batch's embeddings
  at::Tensor e_hat, e_norm;     // [B, D], [B]
  at::Tensor w_hat, w_norm;     // [m, D], [m]
  at::Tensor G;                 // [B, m]: cosines, logits, exp(z − row max), then dL/dc
  at::Tensor over;              // bool [B, m]: |<e, w>| > 1 before the clamp
  at::Tensor c_pos, z_pos;      // double [P]: cosines and logits of the positive entries
  at::Tensor row_max, row_sum;  // float [B], double [B]
  at::Tensor shift_a, shift_b;  // double [B]
  at::Tensor cos_total;         // double 0-d: the sum of the clamped cosines
  at::Tensor red;               // double [2B + 5], reduced over ranks
  at::Tensor neg_factor, pos_log, pos_coef;  // double [B]
  at::Tensor loss;                           // double 0-d
};

at::Tensor Gemm(const at::Tensor& a, const at::Tensor& b, bool bf16) {
  if (!bf16) return at::mm(a, b);
  return at::mm(a.to(at::kBFloat16), b.to(at::kBFloat16)).to(at::kFloat);
}

// The plan (positives, sampled rows, the batch layout) in one host tensor, then one copy.
DevicePlan MakePlan(const PartialFcStepState& st, const std::vector<int64_t>& batch_rows,
                    ClassRange range, const at::TensorOptions& device_long) {
  const int64_t B = st.B, m = st.m;
  std::vector<int64_t> pos_flat, pos_i;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t q = st.pos_begin[i]; q < st.pos_begin[i + 1]; ++q) {
      const int64_t c = st.pos_ids[q];
      if (!range.contains(c)) continue;
      const int64_t j = std::lower_bound(st.sampled.begin(), st.sampled.end(), c - range.begin) -
                        st.sampled.begin();
      pos_flat.push_back(i * m + j);
      pos_i.push_back(i);
    }
  }
  const int64_t P = static_cast<int64_t>(pos_flat.size());
  const int64_t nb = static_cast<int64_t>(batch_rows.size());
  at::Tensor host = at::empty({m + 2 * P + B + nb}, at::kLong);
  int64_t* h = host.data_ptr<int64_t>();
  std::copy(st.sampled.begin(), st.sampled.end(), h);
  std::copy(pos_flat.begin(), pos_flat.end(), h + m);
  std::copy(pos_i.begin(), pos_i.end(), h + m + P);
  const int64_t* Yp = st.Y.data_ptr<int64_t>();
  for (int64_t i = 0; i < B; ++i) h[m + 2 * P + i] = Yp[i * st.l] >= 0 ? 1 : 0;
  std::copy(batch_rows.begin(), batch_rows.end(), h + m + 2 * P + B);
  const bool cuda = device_long.device().is_cuda();
  at::Tensor dev = host.numel() == 0
                       ? at::empty({0}, device_long)
                       : (cuda ? host.pin_memory() : host).to(device_long, /*non_blocking=*/cuda);
  DevicePlan plan;
  plan.rows = dev.narrow(0, 0, m);
  plan.pos_flat = dev.narrow(0, m, P);
  plan.pos_i = dev.narrow(0, m + P, P);
  plan.target_ok = dev.narrow(0, m + 2 * P, B);
  plan.batch_rows = dev.narrow(0, m + 2 * P + B, nb);
  plan.positives = P;
  return plan;
}

at::Tensor MarginLogits(const at::Tensor& c, const PartialFcOptions& o) {
  switch (o.margin_type) {
    case MarginType::kArc:
      return (at::acos(c) + o.margin).cos() * o.scale;
    case MarginType::kCos:
      return (c - o.margin) * o.scale;
    case MarginType::kNone:
      return c * o.scale;
  }
  return c * o.scale;
}

// Normalised rows, cosines (clamped), the positives' logits, the logits with the positives
// masked (all but softmax), and exp(z − row max) with the row maxima and sums.
void DeviceLogits(const PartialFcOptions& o, const at::Tensor& weight, const DevicePlan& plan,
                  int64_t m, DeviceTerms* t) {
  const int64_t B = t->E.size(0);
  t->e_norm = t->E.norm(2, {1}).clamp_min(kNormEps);
  t->e_hat = t->E / t->e_norm.unsqueeze(1);
  at::Tensor W = weight.index_select(0, plan.rows);
  t->w_norm = W.norm(2, {1}).clamp_min(kNormEps);
  t->w_hat = W / t->w_norm.unsqueeze(1);
  t->G = Gemm(t->e_hat, t->w_hat.t(), o.bf16_gemm);  // [B, m]
  t->over = t->G.abs().gt(1.0);
  t->G.clamp_(-1.0, 1.0);
  t->cos_total = t->G.sum(at::kDouble);
  at::Tensor flat = t->G.view({-1});
  t->c_pos = flat.index_select(0, plan.pos_flat).to(at::kDouble);
  t->z_pos = MarginLogits(t->c_pos, o);
  t->G.mul_(o.scale);
  if (o.variant == LossVariant::kSoftmax) {
    flat.index_copy_(0, plan.pos_flat, t->z_pos.to(at::kFloat));
  } else {
    flat.index_fill_(0, plan.pos_flat, -kInf);
  }
  const auto f32 = t->E.options();
  if (m == 0) {
    t->row_max = at::zeros({B}, f32);
    t->row_sum = at::zeros({B}, f32.dtype(at::kDouble));
    return;
  }
  t->row_max = t->G.amax(1);
  t->row_max.masked_fill_(at::isinf(t->row_max), 0.0);
  t->G.sub_(t->row_max.unsqueeze(1)).exp_();
  t->row_sum = t->G.sum({1}, false, at::kDouble);
}

// Per-sample shifts: the analytic bound, or global maxima from a MAX allreduce.
Status DeviceShifts(const PartialFcOptions& o, const DevicePlan& plan, Collectives* comm,
                    DeviceTerms* t) {
  const int64_t B = t->E.size(0);
  const auto f64 = t->E.options().dtype(at::kDouble);
  const double U = o.scale * (1.0 + std::fabs(o.margin));
  if (U <= kMaxBoundShift) {
    t->shift_a = at::full({B}, U, f64);
    t->shift_b = t->shift_a;
    return Status::Ok();
  }
  at::Tensor a = at::where(t->row_sum.gt(0), t->row_max.to(at::kDouble), -kInf);
  at::Tensor b = at::full({B}, -kInf, f64);
  if (o.variant != LossVariant::kSoftmax) b.scatter_reduce_(0, plan.pos_i, -t->z_pos, "amax");
  at::Tensor maxima = at::cat({a, b});
  MLCD_RETURN_IF_ERROR(comm->AllReduce(maxima, ReduceOp::kMax));
  const double floor_a = o.variant == LossVariant::kMlcd ? 0.0 : -kInf;
  auto finite_or_zero = [&](const at::Tensor& x) {
    at::Tensor y = x.clamp_min(floor_a);
    return at::where(at::isfinite(y), y, at::zeros_like(y));
  };
  t->shift_a = finite_or_zero(maxima.narrow(0, 0, B));
  t->shift_b = finite_or_zero(maxima.narrow(0, B, B));
  return Status::Ok();
}

// The per-sample sums (a: negatives or all of S; b: positives or the target's logit) and the
// statistics, before the SUM allreduce.
at::Tensor LocalSums(const PartialFcOptions& o, const DevicePlan& plan, int64_t m,
                     const DeviceTerms& t) {
  const int64_t B = t.E.size(0), P = plan.positives;
  const auto f64 = t.E.options().dtype(at::kDouble);
  at::Tensor a =
      at::where(t.row_sum.gt(0), t.row_sum * (t.row_max.to(at::kDouble) - t.shift_a).exp(),
                at::zeros({B}, f64));
  at::Tensor b = at::zeros({B}, f64);
  if (o.variant == LossVariant::kSoftmax) {
    b.index_add_(0, plan.pos_i, t.z_pos);
  } else {
    b.index_add_(0, plan.pos_i, (-t.z_pos - t.shift_b.index_select(0, plan.pos_i)).exp());
  }
  at::Tensor pos_cos = t.c_pos.sum();
  at::Tensor stats =
      at::stack({pos_cos, at::scalar_tensor(static_cast<double>(P), f64), t.cos_total - pos_cos,
                 at::scalar_tensor(static_cast<double>(B * m - P), f64),
                 at::scalar_tensor(static_cast<double>(m), f64)});
  return at::cat({a, b, stats});
}

// The loss and the per-sample gradient factors from the reduced sums (every rank the same).
void DeviceLossAndFactors(const PartialFcOptions& o, const DevicePlan& plan, DeviceTerms* t) {
  const int64_t B = t->E.size(0);
  const at::Tensor a = t->red.narrow(0, 0, B), b = t->red.narrow(0, B, B);
  const at::Tensor rm = t->row_max.to(at::kDouble), sa = t->shift_a, sb = t->shift_b;
  at::Tensor zero = at::zeros_like(a);
  at::Tensor loss_i;
  switch (o.variant) {
    case LossVariant::kMlcd: {
      at::Tensor ln = sa + ((-sa).exp() + a).log();  // log(1 + Σ_n e^{z_n})
      at::Tensor lp = sb + ((-sb).exp() + b).log();  // log(1 + Σ_p e^{-z_p})
      loss_i = ln + lp;
      t->neg_factor = (rm - ln).exp();
      t->pos_log = lp;
      t->pos_coef = at::ones_like(a);
      break;
    }
    case LossVariant::kMlc: {
      at::Tensor valid = a.gt(0).logical_and(b.gt(0));
      at::Tensor log_n = sa + a.log(), log_p = sb + b.log();
      at::Tensor u = log_n + log_p;
      at::Tensor softplus =
          at::where(u.gt(0), u + (-u).exp().log1p(), u.exp().log1p());  // log(1 + e^u)
      at::Tensor sigma = u.sigmoid();
      loss_i = at::where(valid, softplus, zero);
      t->neg_factor = at::where(valid, sigma * (rm - log_n).exp(), zero);
      t->pos_log = at::where(valid, log_p, zero);
      t->pos_coef = at::where(valid, sigma, zero);
      break;
    }
    case LossVariant::kSoftmax: {
      at::Tensor valid = plan.target_ok.gt(0).logical_and(a.gt(0));
      at::Tensor lse = sa + a.log();
      loss_i = at::where(valid, lse - b, zero);
      t->neg_factor = at::where(valid, (rm - lse).exp(), zero);
      t->pos_log = zero;
      t->pos_coef = valid.to(at::kDouble);
      break;
    }
  }
  t->loss = loss_i.sum() / static_cast<double>(B);
}

// dL/dc in place of G (PartialFC's margin convention: dz/dc = s), mean over B.
void DeviceLogitGradients(const PartialFcOptions& o, const DevicePlan& plan, int64_t m,
                          DeviceTerms* t) {
  if (m <= 0) return;
  const double g_scale = o.scale / static_cast<double>(t->E.size(0));
  t->G.mul_((t->neg_factor * g_scale).to(at::kFloat).unsqueeze(1));
  at::Tensor flat = t->G.view({-1});
  const at::Tensor coef = t->pos_coef.index_select(0, plan.pos_i);
  at::Tensor values;
  if (o.variant == LossVariant::kSoftmax) {
    values = flat.index_select(0, plan.pos_flat) -
             coef.ne(0).to(at::kFloat) * static_cast<float>(g_scale);
  } else {
    values = (-coef * (-t->z_pos - t->pos_log.index_select(0, plan.pos_i)).exp() * g_scale)
                 .to(at::kFloat);
  }
  flat.index_copy_(0, plan.pos_flat, values);
  t->G.masked_fill_(t->over, 0.0);
}

// The statistics and the loss, read on the host once: the step's only synchronisation.
StatusOr<PartialFcStats> ReadStats(const DeviceTerms& t) {
  const int64_t B = t.E.size(0);
  at::Tensor host = at::cat({t.loss.reshape({1}), t.red.narrow(0, 2 * B, kStatistics)}).cpu();
  const double* r = host.data_ptr<double>();
  PartialFcStats stats;
  stats.loss = r[0];
  stats.global_batch_size = B;
  stats.positive_pairs = static_cast<int64_t>(std::llround(r[2]));
  stats.negative_pairs = static_cast<int64_t>(std::llround(r[4]));
  stats.mean_positive_cosine = stats.positive_pairs > 0 ? r[1] / r[2] : 0.0;
  stats.mean_negative_cosine = stats.negative_pairs > 0 ? r[3] / r[4] : 0.0;
  stats.sampled_classes = static_cast<int64_t>(std::llround(r[5]));
  if (!std::isfinite(stats.loss)) {
    return Status::InvalidArgument("the loss is not finite (" + std::to_string(stats.loss) +
                                   "): non-finite embeddings or class centres");
  }
  return stats;
}

}  // namespace

// Embeddings all-gathered on the device (padded to the largest rank's batch); labels gathered
// the same way and read on the host, where the plan needs them. *packed_rows: row of each
// global sample in the padded gather (empty at world size 1: no gather).
Status PartialFc::Impl::GatherOnDevice(const at::Tensor& emb_in, const at::Tensor& labels_in,
                                       PartialFcStepState* st, std::vector<int64_t>* packed_rows) {
  const int world = comm->world_size();
  const int64_t l = st->l, b_local = st->b_local, b_max = st->b_max;
  at::Tensor labels_local = labels_in.to(at::kLong).reshape({b_local, l}).contiguous();
  if (world == 1) {
    st->E = emb_in.contiguous();
    st->Y = labels_local;
    return Status::Ok();
  }
  at::Tensor emb_pad = at::zeros({b_max, dim}, emb_in.options());
  emb_pad.narrow(0, 0, b_local).copy_(emb_in);
  at::Tensor lab_pad = at::full({b_max, l}, -1, at::kLong);
  lab_pad.narrow(0, 0, b_local).copy_(labels_local);
  at::Tensor all_emb, all_lab;
  MLCD_RETURN_IF_ERROR(Timed([&] {
    MLCD_RETURN_IF_ERROR(comm->AllGather(emb_pad, &all_emb));
    return comm->AllGather(lab_pad.to(comm->device()), &all_lab);
  }));
  all_lab = all_lab.cpu();
  packed_rows->clear();
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < st->sizes[r]; ++i) packed_rows->push_back(r * b_max + i);
  }
  at::Tensor rows_host =
      at::from_blob(packed_rows->data(), {static_cast<int64_t>(packed_rows->size())}, at::kLong);
  st->Y = all_lab.index_select(0, rows_host);
  st->E = all_emb;  // compacted with the plan's batch_rows on the device
  return Status::Ok();
}

StatusOr<PartialFcStep> PartialFc::Impl::DeviceStep(const at::Tensor& emb_in,
                                                    const at::Tensor& labels_in,
                                                    const at::Tensor* negatives_in) {
  collective_seconds = 0;
  pending = false;
  pending_rows = at::Tensor();
  pending_grad = at::Tensor();
  DeviceTimer timer(options.device);
  const int start = timer.Mark();
  PartialFcStepState st;
  std::vector<int64_t> packed_rows;
  MLCD_RETURN_IF_ERROR(ExchangeShapes(emb_in, labels_in, negatives_in, &st));
  MLCD_RETURN_IF_ERROR(GatherOnDevice(emb_in, labels_in, &st, &packed_rows));
  MLCD_RETURN_IF_ERROR(CollectPositives(&st));
  SampleClasses(negatives_in != nullptr, &st);

  const int world = comm->world_size(), rank = comm->rank();
  const int64_t m = st.m, b_local = st.b_local;
  DevicePlan plan = MakePlan(st, packed_rows, range, emb_in.options().dtype(at::kLong));
  DeviceTerms t;
  t.E = world == 1 ? st.E : st.E.index_select(0, plan.batch_rows);
  DeviceLogits(options, weight, plan, m, &t);
  MLCD_RETURN_IF_ERROR(DeviceShifts(options, plan, comm, &t));
  t.red = LocalSums(options, plan, m, t);
  const int before_reduce = timer.Mark();
  MLCD_RETURN_IF_ERROR(Timed([&] { return comm->AllReduce(t.red, ReduceOp::kSum); }));
  const int after_reduce = timer.Mark();
  DeviceLossAndFactors(options, plan, &t);
  DeviceLogitGradients(options, plan, m, &t);
  at::Tensor grad_e_hat = Gemm(t.G, t.w_hat, options.bf16_gemm);      // [B, D]
  at::Tensor grad_w_hat = Gemm(t.G.t(), t.e_hat, options.bf16_gemm);  // [m, D]
  at::Tensor grad_local_hat = grad_e_hat;
  const int before_scatter = timer.Mark();
  if (world > 1) {
    at::Tensor padded = at::zeros({world * st.b_max, dim}, grad_e_hat.options());
    padded.index_copy_(0, plan.batch_rows, grad_e_hat);
    at::Tensor mine;
    MLCD_RETURN_IF_ERROR(Timed([&] { return comm->ReduceScatter(padded, &mine); }));
    grad_local_hat = mine.narrow(0, 0, b_local);
  }
  const int after_scatter = timer.Mark();
  const int64_t own = st.offsets[rank];
  PartialFcStep result;
  result.grad_embeddings = NormalizeRowsBackward(grad_local_hat, t.e_hat.narrow(0, own, b_local),
                                                 t.e_norm.narrow(0, own, b_local));
  at::Tensor grad_w = NormalizeRowsBackward(grad_w_hat, t.w_hat, t.w_norm);
  const int end = timer.Mark();
  MLCD_ASSIGN_OR_RETURN(PartialFcStats stats, ReadStats(t));
  pending_rows = plan.rows;
  pending_grad = grad_w;
  pending = true;
  result.loss = stats.loss;
  result.stats = stats;
  // The device's time in the step's two collectives (events on CUDA); the plan's exchange of
  // shapes and labels counts as compute.
  const double device_collectives =
      timer.Seconds(before_reduce, after_reduce) + timer.Seconds(before_scatter, after_scatter);
  result.collective_seconds = device_collectives;
  result.compute_seconds = timer.Seconds(start, end) - device_collectives;
  return result;
}

}  // namespace mlcd::worker
