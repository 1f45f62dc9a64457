// The contrastive losses over the gathered global batch: SimCLR's InfoNCE (NT-Xent), SupCon
// with the "all" and "any" positive rules, and multi-label MulSupCon; with an analytic backward
// and the gradient returned to the rank that owns each row. The full definitions are in
// docs/loss.md ("Contrastive losses"); the summary:
//
// The global batch is the ranks' rows in rank order, N rows in all. Rows are views: with
// `views` = 2 rows 2k and 2k+1 of a rank's rows are the two augmented views of one image
// (interleaved), so the pairing survives any split of the images over the ranks and every
// rank passes an even number of rows; with `views` = 1 every row is its own image. Labels are
// per row (int64 [n_local, l], < 0 = padding, a label repeated in a row counts once; Y_i = the
// distinct labels of row i).
//
// With z the L2-normalised rows and τ the temperature, for anchor i and a ≠ i:
//   log p_ia = z_i·z_a/τ − log Σ_{b≠i} exp(z_i·z_b/τ)     (the denominator: all other N − 1 rows)
//   infonce:    P(i) = {partner(i)}                        L_i = −log p_i,partner(i)
//   supcon-all: P(i) = {a ≠ i : Y_a = Y_i ≠ ∅} ∪ partner   L_i = −(1/|P(i)|) Σ_{p∈P(i)} log p_ip
//   supcon-any: P(i) = {a ≠ i : Y_a ∩ Y_i ≠ ∅} ∪ partner  (same L_i)
//   mulsupcon:  P_j(i) = {a ≠ i : j ∈ Y_a} ∪ partner for each j ∈ Y_i; J_i = {j ∈ Y_i : P_j(i) ≠ ∅}
//               L_i = (1/|J_i|) Σ_{j∈J_i} −(1/|P_j(i)|) Σ_{p∈P_j(i)} log p_ip
// "∪ partner" applies with two views: a row's other view is a positive in every variant (for
// mulsupcon, in every P_j(i)); an unlabelled row therefore still has its partner in supcon-all
// and supcon-any, but in mulsupcon (no label j to average over) it has no positive. A label
// that no other row carries leaves P_j(i) empty and is excluded from J_i; an anchor whose
// positive set is empty (J_i empty for mulsupcon) contributes nothing.
//   L = (1/M) Σ_{anchors with a positive} L_i, M = the number of such anchors over the global
//   batch (L = 0 and zero gradients when M = 0).
// Every variant is L_i = −Σ_a w_ia log p_ia with weights w_ia ≥ 0 summing to 1 over a, so
// dL/d(z_i·z_a/τ) = (p_ia − w_ia)/M for contributing anchors; the gradient flows into both the
// anchor and the contrasted row (one encoder, no momentum copy).
//
// Per call, on every rank: allgather the rows' shapes, then the padded rows and labels (ranks
// may hold different row counts; each is padded to the largest); compute the terms of this
// rank's own anchors against the whole batch; allreduce the loss sum and the counts; then the
// gradient with respect to the gathered rows is reduce-scattered (summed) back to the rows'
// owners, so each rank gets dL/d(own rows) of the global-mean loss.
//
// Usage by a trainer (every rank, same order):
//   MLCD_ASSIGN_OR_RETURN(ContrastiveStep r,
//                         ContrastiveForwardBackward(options, *comm, z.detach(), labels));
//   z.backward(r.grad_embeddings);   // then allreduce the backbone gradients (sum)
//
// Arithmetic in the embeddings' dtype (float32, or float64 when the caller passes float64);
// every tensor is made with the embeddings' options. Errors: INVALID_ARGUMENT on every rank
// for bad input (local checks are exchanged, so ranks never diverge into a hang) or a
// non-finite loss; collective failures come from Collectives.
//
// The variant is the project's enumeration (common/enums.h: ParseContrastiveVariant, parsed
// once at the edge). A job's loss.variant names either a classification variant (LossVariant,
// worker/loss/partial_fc.h) or a contrastive one: LossFamilyOf(name) tells which.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/enums.h"
#include "common/status.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker {

using ::mlcd::ContrastiveVariant;
using ::mlcd::ContrastiveVariantName;
using ::mlcd::ParseContrastiveVariant;

// The most views of one image the layout knows (interleaved rows).
constexpr int kMaxContrastiveViews = 2;

struct ContrastiveOptions {
  ContrastiveVariant variant = ContrastiveVariant::kMulSupCon;
  double temperature = 0.1;  // τ, finite and > 0
  // Rows per image: 1, or 2 (rows 2k and 2k+1 of each rank are one image's two views).
  // infonce needs 2.
  int views = 2;
  // A global batch of fewer than 2 rows: INVALID_ARGUMENT (false), or L = 0 with zero
  // gradients (true; for callers whose rows are a selection that may be that small, as the
  // label-level contrastive loss's active embeddings, worker/loss/llcl.h).
  bool small_batch_is_zero = false;
};

// INVALID_ARGUMENT naming the field: temperature not finite or <= 0, views outside
// [1, kMaxContrastiveViews], infonce with one view, an unknown variant value.
Status ValidateContrastiveOptions(const ContrastiveOptions& options);

// Per-call statistics, identical on every rank.
struct ContrastiveStats {
  double loss = 0;                        // L
  int64_t global_batch_size = 0;          // N, rows (views) of the global batch
  int64_t anchors_with_positives = 0;     // M
  int64_t anchors_without_positives = 0;  // N − M
  // Mean over all N anchors of the number of distinct rows that are a positive of the anchor
  // (|P(i)|; for mulsupcon |∪_{j∈J_i} P_j(i)|).
  double mean_positives = 0;
};

struct ContrastiveStep {
  double loss = 0;             // = stats.loss, the same on every rank
  at::Tensor grad_embeddings;  // [n_local, D], dL/d(local_embeddings) (raw, before normalising)
  ContrastiveStats stats;
  double collective_seconds = 0;  // wall time inside collectives (this rank)
  double compute_seconds = 0;     // the rest
};

// One forward and backward over the global batch (a collective: every rank calls it with its
// own rows). local_embeddings: float32 or float64 [n_local, D], n_local >= 0 (even with two
// views), D and the dtype the same on every rank. local_labels: int64 or int32 [n_local, l]
// (1-d: l = 1), l >= 1 and the same on every rank; not read by infonce (may be undefined).
// The global batch needs at least 2 rows (see small_batch_is_zero).
StatusOr<ContrastiveStep> ContrastiveForwardBackward(const ContrastiveOptions& options,
                                                     Collectives& comm,
                                                     const at::Tensor& local_embeddings,
                                                     const at::Tensor& local_labels);

}  // namespace mlcd::worker
