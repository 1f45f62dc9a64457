// ContrastiveForwardBackward as named stages: exchange shapes, gather the batch, positive
// weights of this rank's anchors, loss and logit gradients, the gradient back to its owners.
#include "worker/loss/contrastive_loss.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/stopwatch.h"
#include "worker/loss/partial_fc_state.h"

namespace mlcd::worker {
namespace {

constexpr double kNormEps = 1e-12;  // as F.normalize
// The meta row each rank contributes: n_local, D, l, dtype code, "my input is invalid".
constexpr int64_t kMetaFields = 5;

using Clock = std::chrono::steady_clock;
// Runs a collective and adds its wall time to the step's collective time.
using TimedFn = std::function<Status(const std::function<Status()>&)>;

bool IsIntegerType(at::ScalarType t) { return t == at::kLong || t == at::kInt; }

// The shapes of the global batch and this rank's place in it.
struct Batch {
  std::vector<int64_t> sizes, offsets;  // rows per rank; offsets[r] = first row of rank r
  int64_t n_local = 0, n_max = 0, N = 0, D = 0, l = 0;
  int64_t offset = 0;  // this rank's first row
  at::Tensor E, Y;     // the gathered rows [N, D] (embeddings' dtype) and labels [N, l] int64
};

// The local checks; empty when the input is fine. Sets *l (0 for infonce).
std::string CheckLocalInput(const ContrastiveOptions& o, const at::Tensor& emb,
                            const at::Tensor& labels, int64_t* l) {
  if (!emb.defined() || emb.dim() != 2 ||
      (emb.scalar_type() != at::kFloat && emb.scalar_type() != at::kDouble)) {
    return "embeddings must be a 2-d float32 or float64 tensor [n_local, D], got " +
           TensorShapeString(emb);
  }
  const int64_t n = emb.size(0);
  if (o.views == 2 && n % 2 != 0) {
    return "with two views the rows come in pairs (rows 2k and 2k+1 are one image's views), "
           "but this rank has " +
           std::to_string(n) + " rows";
  }
  *l = 0;
  if (o.variant == ContrastiveVariant::kInfoNce) return "";
  if (!labels.defined() || (labels.dim() != 1 && labels.dim() != 2) ||
      !IsIntegerType(labels.scalar_type())) {
    return std::string("variant ") + ContrastiveVariantName(o.variant) +
           " needs labels, a 2-d int64 tensor [n_local, l] (-1 = padding), got " +
           TensorShapeString(labels);
  }
  if (labels.size(0) != n) {
    return "labels have " + std::to_string(labels.size(0)) + " rows but embeddings have " +
           std::to_string(n) + " (one row of labels per embedding row)";
  }
  *l = labels.dim() == 1 ? 1 : labels.size(1);
  if (*l < 1) return "labels have no column; give a row without labels -1";
  return "";
}

// Allgathers every rank's shapes and verdict, so that all ranks take the same decision.
Status ExchangeShapes(const ContrastiveOptions& o, Collectives& comm, const at::Tensor& emb,
                      const at::Tensor& labels, const TimedFn& timed, Batch* b) {
  const int world = comm.world_size();
  int64_t l = 0;
  const std::string local_error = CheckLocalInput(o, emb, labels, &l);
  const bool ok = local_error.empty();
  at::TensorOptions long_options =
      emb.defined() ? emb.options().dtype(at::kLong) : at::TensorOptions(at::kLong);
  at::Tensor meta =
      at::tensor(std::vector<int64_t>{ok ? emb.size(0) : 0, ok ? emb.size(1) : 0, l,
                                      ok && emb.scalar_type() == at::kDouble ? 1 : 0, ok ? 0 : 1},
                 long_options);
  at::Tensor metas;
  MLCD_RETURN_IF_ERROR(timed([&] { return comm.AllGather(meta, &metas); }));
  metas = metas.cpu();
  auto mv = metas.accessor<int64_t, 1>();
  std::string bad_ranks;
  for (int r = 0; r < world; ++r) {
    if (mv[kMetaFields * r + 4] != 0)
      bad_ranks += (bad_ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!ok) return Status::InvalidArgument(local_error);
  if (!bad_ranks.empty()) {
    return Status::InvalidArgument("the step's input was rejected on rank(s) " + bad_ranks +
                                   " (see their error)");
  }
  const char* field_names[] = {"rows", "embedding dimension D", "label width l", "dtype"};
  for (int r = 1; r < world; ++r) {
    for (int f = 1; f < 4; ++f) {
      if (mv[kMetaFields * r + f] != mv[f]) {
        return Status::InvalidArgument(std::string(field_names[f]) +
                                       " differs between ranks: rank 0 has " +
                                       std::to_string(mv[f]) + ", rank " + std::to_string(r) +
                                       " has " + std::to_string(mv[kMetaFields * r + f]));
      }
    }
  }
  b->sizes.assign(world, 0);
  b->offsets.assign(world + 1, 0);
  for (int r = 0; r < world; ++r) {
    b->sizes[r] = mv[kMetaFields * r];
    b->offsets[r + 1] = b->offsets[r] + b->sizes[r];
  }
  b->n_local = b->sizes[comm.rank()];
  b->offset = b->offsets[comm.rank()];
  b->N = b->offsets[world];
  b->n_max = *std::max_element(b->sizes.begin(), b->sizes.end());
  b->D = mv[1];
  b->l = mv[2];
  return Status::Ok();
}

// The rows of the padded gathered [world * n_max, ...] tensor that hold real rows, in order.
at::Tensor RealRows(const Batch& b, const at::TensorOptions& long_options) {
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(b.N));
  for (size_t r = 0; r < b.sizes.size(); ++r) {
    for (int64_t i = 0; i < b.sizes[r]; ++i) rows.push_back(static_cast<int64_t>(r) * b.n_max + i);
  }
  return at::tensor(rows, long_options);
}

// Allgathers the rows and labels (each rank's padded to the largest local batch).
Status GatherBatch(Collectives& comm, const at::Tensor& emb, const at::Tensor& labels,
                   const TimedFn& timed, Batch* b) {
  at::Tensor padded = at::zeros({b->n_max, b->D}, emb.options());
  padded.narrow(0, 0, b->n_local).copy_(emb);
  at::Tensor all_rows;
  MLCD_RETURN_IF_ERROR(timed([&] { return comm.AllGather(padded, &all_rows); }));
  const at::Tensor real = RealRows(*b, emb.options().dtype(at::kLong));
  b->E = all_rows.index_select(0, real);
  if (b->l == 0) return Status::Ok();
  at::Tensor padded_labels = at::full({b->n_max, b->l}, -1, emb.options().dtype(at::kLong));
  padded_labels.narrow(0, 0, b->n_local)
      .copy_(labels.to(emb.device(), at::kLong).reshape({b->n_local, b->l}));
  at::Tensor all_labels;
  MLCD_RETURN_IF_ERROR(timed([&] { return comm.AllGather(padded_labels, &all_labels); }));
  b->Y = all_labels.index_select(0, real);
  return Status::Ok();
}

// Labels with padding as -1 and a label repeated in a row kept once (later copies -1).
at::Tensor DistinctLabels(const at::Tensor& Y) {
  at::Tensor out = Y.masked_fill(Y < 0, -1);
  for (int64_t u = 1; u < out.size(1); ++u) {
    at::Tensor col = out.select(1, u);
    for (int64_t v = 0; v < u; ++v) col.masked_fill_(col.eq(out.select(1, v)), -1);
  }
  return out;
}

// The positive weights w [n_local, N] of this rank's anchors (each row sums to 1, or is 0 for
// an anchor without positive) and the number of distinct positives of each anchor [n_local].
void PositiveWeights(const ContrastiveOptions& o, const Batch& b, const at::Tensor& self_cols,
                     at::Tensor* weights, at::Tensor* positives) {
  const at::TensorOptions opts = b.E.options();
  const int64_t n = b.n_local;
  const at::Tensor self_index = self_cols.unsqueeze(1);
  const at::Tensor partner_index = at::bitwise_xor(self_cols, 1).unsqueeze(1);
  // Removes the anchor itself and, with two views, adds its other view.
  auto own_views = [&](at::Tensor m) {
    m.scatter_(1, self_index, false);
    if (o.views == 2) m.scatter_(1, partner_index, true);
    return m;
  };
  at::Tensor mask;  // [n, N]: a is a positive of anchor i
  if (o.variant == ContrastiveVariant::kInfoNce) {
    mask = own_views(at::zeros({n, b.N}, opts.dtype(at::kBool)));
  } else {
    const at::Tensor Y = DistinctLabels(b.Y);
    const at::Tensor Yo = Y.narrow(0, b.offset, n);
    const at::Tensor Y_other = Y.masked_fill(Y < 0, -2);  // padding matches nothing
    const at::Tensor valid = Yo >= 0;
    at::Tensor shared = at::zeros({n, b.N}, opts.dtype(at::kLong));  // |Y_i ∩ Y_a|
    std::vector<at::Tensor> label_sets;  // mulsupcon: P_j(i) for j = column u of the anchor
    for (int64_t u = 0; u < b.l; ++u) {
      // [n, N]: row a carries the anchor's label in column u.
      at::Tensor carries = Yo.select(1, u).view({n, 1, 1}).eq(Y_other.unsqueeze(0)).any(2);
      shared.add_(carries);
      if (o.variant == ContrastiveVariant::kMulSupCon) {
        label_sets.push_back(own_views(carries).logical_and_(valid.select(1, u).unsqueeze(1)));
      }
    }
    if (o.variant == ContrastiveVariant::kMulSupCon) {
      // J_i = the anchor's labels with a positive; each gets 1/|J_i|, spread over its P_j(i).
      at::Tensor J = at::zeros({n}, opts);
      for (const at::Tensor& P : label_sets) J.add_(P.any(1).to(opts.dtype()));
      at::Tensor w = at::zeros({n, b.N}, opts);
      mask = at::zeros({n, b.N}, opts.dtype(at::kBool));
      for (const at::Tensor& P : label_sets) {
        at::Tensor share = (P.sum(1).to(opts.dtype()) * J).clamp_min(1).reciprocal();
        w.add_(P.to(opts.dtype()) * share.unsqueeze(1));
        mask.logical_or_(P);
      }
      *weights = w;
      *positives = mask.sum(1);
      return;
    }
    const at::Tensor sizes = valid.sum(1);
    if (o.variant == ContrastiveVariant::kSupConAny) {
      mask = shared.gt(0);
    } else {  // the same non-empty label set
      const at::Tensor sizes_all = (Y >= 0).sum(1);
      mask = shared.eq(sizes.unsqueeze(1))
                 .logical_and_(sizes_all.unsqueeze(0).eq(sizes.unsqueeze(1)))
                 .logical_and_(sizes.gt(0).unsqueeze(1));
    }
    mask = own_views(mask);
  }
  *positives = mask.sum(1);
  const at::Tensor w = mask.to(opts.dtype());
  *weights = w / w.sum(1, /*keepdim=*/true).clamp_min(1);
}

}  // namespace

Status ValidateContrastiveOptions(const ContrastiveOptions& options) {
  const int v = static_cast<int>(options.variant);
  if (v < 0 || v >= static_cast<int>(ContrastiveVariantNames().size())) {
    return Status::InvalidArgument("variant has no name (value " + std::to_string(v) +
                                   "); parse it with ParseContrastiveVariant");
  }
  if (!std::isfinite(options.temperature) || !(options.temperature > 0)) {
    return Status::InvalidArgument("temperature must be a finite number > 0, got " +
                                   std::to_string(options.temperature));
  }
  if (options.views < 1 || options.views > kMaxContrastiveViews) {
    return Status::InvalidArgument("views must be 1 or 2 (rows per image), got " +
                                   std::to_string(options.views));
  }
  if (options.variant == ContrastiveVariant::kInfoNce && options.views != 2) {
    return Status::InvalidArgument(
        "views must be 2 for variant infonce: an image's positive is its other view");
  }
  return Status::Ok();
}

StatusOr<ContrastiveStep> ContrastiveForwardBackward(const ContrastiveOptions& options,
                                                     Collectives& comm,
                                                     const at::Tensor& local_embeddings,
                                                     const at::Tensor& local_labels) {
  const auto t_start = Clock::now();
  MLCD_RETURN_IF_ERROR(ValidateContrastiveOptions(options));
  double collective_seconds = 0;
  auto timed = [&collective_seconds](const std::function<Status()>& body) {
    const auto t0 = Clock::now();
    Status s = body();
    collective_seconds += SecondsBetween(t0, Clock::now());
    return s;
  };
  Batch b;
  MLCD_RETURN_IF_ERROR(ExchangeShapes(options, comm, local_embeddings, local_labels, timed, &b));
  if (b.N < 2) {
    if (!options.small_batch_is_zero) {
      return Status::InvalidArgument("the global batch has " + std::to_string(b.N) +
                                     " row(s); a contrastive loss needs at least 2");
    }
    ContrastiveStep step;  // no pair: no anchor has a positive
    step.stats.global_batch_size = b.N;
    step.stats.anchors_without_positives = b.N;
    step.grad_embeddings = at::zeros_like(local_embeddings);
    step.collective_seconds = collective_seconds;
    step.compute_seconds = SecondsBetween(t_start, Clock::now()) - collective_seconds;
    return step;
  }
  MLCD_RETURN_IF_ERROR(GatherBatch(comm, local_embeddings, local_labels, timed, &b));
  const at::TensorOptions opts = b.E.options();
  const double inv_tau = 1.0 / options.temperature;

  // Normalised rows; this rank's anchors are rows [offset, offset + n_local).
  const at::Tensor norms = b.E.norm(2, {1}).clamp_min(kNormEps);
  const at::Tensor Z = b.E / norms.unsqueeze(1);
  const at::Tensor Zo = Z.narrow(0, b.offset, b.n_local);
  const at::Tensor self_cols = at::arange(b.offset, b.offset + b.n_local, opts.dtype(at::kLong));
  at::Tensor logits = at::mm(Zo, Z.t()).mul_(inv_tau);  // [n_local, N]
  logits.scatter_(1, self_cols.unsqueeze(1), -std::numeric_limits<double>::infinity());
  const at::Tensor log_p = at::log_softmax(logits, 1).scatter_(1, self_cols.unsqueeze(1), 0.0);
  at::Tensor weights, positives;
  PositiveWeights(options, b, self_cols, &weights, &positives);
  const at::Tensor contributing = positives.gt(0);

  // Loss sum, anchors with a positive (M), positives: summed over the ranks.
  at::Tensor sums =
      at::stack({(weights * log_p).sum(at::kDouble).neg(), contributing.sum().to(at::kDouble),
                 positives.sum().to(at::kDouble)});
  MLCD_RETURN_IF_ERROR(timed([&] { return comm.AllReduce(sums, ReduceOp::kSum); }));
  const at::Tensor sums_cpu = sums.cpu();
  const double* sp = sums_cpu.data_ptr<double>();
  ContrastiveStep step;
  ContrastiveStats& stats = step.stats;
  stats.global_batch_size = b.N;
  stats.anchors_with_positives = static_cast<int64_t>(std::llround(sp[1]));
  stats.anchors_without_positives = b.N - stats.anchors_with_positives;
  stats.mean_positives = sp[2] / static_cast<double>(b.N);
  stats.loss = stats.anchors_with_positives > 0 ? sp[0] / sp[1] : 0.0;
  if (!std::isfinite(stats.loss)) {
    return Status::InvalidArgument("the loss is not finite (" + std::to_string(stats.loss) +
                                   "): non-finite embeddings");
  }
  step.loss = stats.loss;

  // dL/dlogit = (p − w)/M on contributing anchors; the logit z_i·z_a/τ reaches both rows.
  const double scale = stats.anchors_with_positives > 0 ? inv_tau / sp[1] : 0.0;
  const at::Tensor g = (log_p.exp().scatter_(1, self_cols.unsqueeze(1), 0.0) - weights)
                           .mul_(contributing.unsqueeze(1).to(opts.dtype()))
                           .mul_(scale);
  at::Tensor grad_z = at::mm(g.t(), Zo);                     // [N, D]: as the contrasted rows
  grad_z.narrow(0, b.offset, b.n_local).add_(at::mm(g, Z));  // as anchors
  const int world = comm.world_size();
  at::Tensor padded = at::zeros({world * b.n_max, b.D}, opts);
  padded.index_copy_(0, RealRows(b, opts.dtype(at::kLong)), grad_z);
  at::Tensor mine;
  MLCD_RETURN_IF_ERROR(timed([&] { return comm.ReduceScatter(padded, &mine); }));
  const at::Tensor grad_hat = mine.narrow(0, 0, b.n_local);
  // Through the normalisation: (g − ẑ (ẑ·g)) / max(|x|, eps).
  const at::Tensor dot = (grad_hat * Zo).sum(1, /*keepdim=*/true);
  step.grad_embeddings = (grad_hat - Zo * dot) / norms.narrow(0, b.offset, b.n_local).unsqueeze(1);
  step.collective_seconds = collective_seconds;
  step.compute_seconds = SecondsBetween(t_start, Clock::now()) - collective_seconds;
  return step;
}

}  // namespace mlcd::worker
