// MulCon's label-level contrastive loss (LLCL; mulcon-contrastive-multilabel.txt Sec. 2.3,
// Eq. 8; docs/loss.md, "Label heads"), over the global batch gathered from the ranks.
//
// Input: the projected label-level embeddings z [n_local, L, d_z] of this rank's images
// (image i, label j: z_ij = Proj(g_ij)) and the images' labels [n_local, l] (< 0 padding, a
// repeated label once). The active set I = {z_ij : j is a label of image i}, over all images
// of all ranks. With ẑ = z / max(|z|, 1e-12) and τ > 0, for an anchor z_ij ∈ I:
//   A(i,j) = I ∖ {z_ij},   P(i,j) = {z_kj ∈ A(i,j)}   (the other images' embeddings of label j)
//   L_ij = −(1/|P(i,j)|) Σ_{p∈P(i,j)} log( exp(ẑ_ij·ẑ_p/τ) / Σ_{a∈A(i,j)} exp(ẑ_ij·ẑ_a/τ) )
//   L = (1/M) Σ L_ij over the M anchors with P(i,j) ≠ ∅      (L = 0 when M = 0)
// An anchor whose label no other image carries has no positive and contributes nothing (the
// paper's Eq. 8 would divide by zero). The paper sums over the anchors; the mean keeps the
// loss's scale independent of the batch, and its weight γ (loss.mulcon.llcl_weight) scales it.
//
// This is the supcon-all loss of worker/loss/contrastive_loss.h with one view, on the active
// rows, each labelled with its one label j: the active rows of every rank are the rows that
// ContrastiveForwardBackward gathers, so the gathering, the loss and the return of each
// rank's gradient are that module's; here only the selection of the active rows and the
// scatter of their gradient back into [n_local, L, d_z] (zero for inactive rows).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/status.h"
#include "worker/dist/collectives.h"
#include "worker/loss/contrastive_loss.h"

namespace mlcd::worker {

struct LlclOptions {
  double temperature = 0.2;  // τ, finite and > 0 (the paper's)
};

struct LlclStep {
  double loss = 0;             // L, the same on every rank
  at::Tensor grad_embeddings;  // [n_local, L, d_z]: dL/dz of this rank's images
  // Over the active embeddings: N = |I| of the global batch, M, the mean positives.
  ContrastiveStats stats;
};

// A collective (every rank, same order). z: float32 or float64 [n_local, L, d_z] (n_local may
// be 0; L and d_z the same on every rank); labels: int [n_local, l] with every label < L.
// INVALID_ARGUMENT on every rank for bad input on any rank.
StatusOr<LlclStep> LlclForwardBackward(const LlclOptions& options, Collectives& comm,
                                       const at::Tensor& z, const at::Tensor& labels);

}  // namespace mlcd::worker
