// Multi-label binary cross-entropy over per-sample label sets, the classification loss of the
// label heads (docs/loss.md, "Label heads"): the image-level BCE head (worker/loss/bce_head.h)
// and MulCon's per-label classifiers (worker/model/label_attention_head.h, paper Eq. 7).
//
// Per sample i of the global batch (B samples over the ranks) and class c of K:
//   y_ic = 1 when c is one of sample i's labels (labels < 0 are padding; a label repeated in
//          a row counts once), else 0;
//   ℓ_ic = −y_ic log σ(x_ic) − (1 − y_ic) log(1 − σ(x_ic))      (x = the logits)
//   L = (1 / (B·K)) Σ_i Σ_c ℓ_ic                                 (mean over samples and classes)
// computed as softplus(x) − y·x, stable for any logit.
//
// Gathered over the ranks: one all-reduce of (this rank's loss sum, its sample count, "my
// labels are invalid") gives B, the loss and a verdict every rank shares, so a bad label on
// one rank is refused on all of them (none waits in a later collective). The returned
// `local_term` is this rank's Σ ℓ_ic / (B·K) with its autograd graph: the ranks' terms sum to
// L, so backpropagating each rank's term and summing the parameters' gradients over the ranks
// (the trainer's all-reduce) gives dL/dθ, the same as one process holding the whole batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker {

// The label check shared by the label heads: labels a 1-d or 2-d int32/int64 tensor with
// `rows` rows and every label < num_classes. Empty when fine, else what is wrong.
std::string CheckMultiLabels(const at::Tensor& labels, int64_t rows, int64_t num_classes);

// y [n, K] in `options`' dtype and device from labels [n, l] (1-d: l = 1): 1 where c is one of
// the row's labels (padding < 0 ignored, repeats once). The labels must pass CheckMultiLabels.
at::Tensor MultiHotTargets(const at::Tensor& labels, int64_t num_classes,
                           const at::TensorOptions& options);

struct MultiLabelBceResult {
  at::Tensor local_term;       // 0-d, with autograd: Σ_{own i, c} ℓ_ic / (B·K)
  double loss = 0;             // L, the same on every rank
  int64_t global_samples = 0;  // B
};

// A collective (every rank, same order). logits: float32 or float64 [n_local, K] (n_local may
// be 0; K the same on every rank); labels: int [n_local, l]. INVALID_ARGUMENT on every rank for
// a label >= K or a malformed tensor (naming the rank), or when B = 0; collective failures
// from Collectives.
StatusOr<MultiLabelBceResult> MultiLabelBce(Collectives& comm, const at::Tensor& logits,
                                            const at::Tensor& labels);

}  // namespace mlcd::worker
