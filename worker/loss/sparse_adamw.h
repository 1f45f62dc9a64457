// Sparse AdamW for the class centres: PyTorch's AdamW formula (decoupled weight decay) applied
// to some rows of a matrix only, with lazy semantics and a step count per row. For each listed
// row r with gradient g (rows not listed are not touched at all: no decay, no moment update,
// their row step stays):
//   t = ++row_steps[r]; w *= 1 − lr·wd; m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
//   w −= lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)
// in float32 (the bias corrections in double). Threads: ATen's intra-op setting. The layer's
// use and its checkpoint form: worker/loss/partial_fc.h.
#pragma once

#include <ATen/core/Tensor.h>

namespace mlcd::worker {

struct SparseAdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// The state updated in place: float32 [n, D] weight and moments, int64 [n] row steps, all
// contiguous CPU tensors.
struct SparseAdamWState {
  at::Tensor weight;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
  at::Tensor row_steps;
};

// One update of the rows `rows` (int64 [m], distinct indices in [0, n)) with gradients `grad`
// (float32 [m, D], row k for rows[k]) at learning rate lr (finite, >= 0; the caller checks).
void SparseAdamWUpdate(const SparseAdamWOptions& options, double lr, const at::Tensor& rows,
                       const at::Tensor& grad, SparseAdamWState* state);

// The same update as ATen ops on the state's device (the device layer): the listed rows are
// gathered (index_select), updated and written back (index_copy_); the bias corrections per
// row in double. No dense [n, D] gradient and no host synchronisation. `rows`, `grad` and the
// state on one device (CPU or CUDA; CPU tensors need not be contiguous). With `apply` (a 0-dim
// bool tensor on that device) the rows are written back updated only where it is true, and
// as they were otherwise (weights, moments and row steps alike), without reading it on the
// host: the step masks the update when the backbone's gradient turns out non-finite.
void SparseAdamWUpdateTensors(const SparseAdamWOptions& options, double lr, const at::Tensor& rows,
                              const at::Tensor& grad, SparseAdamWState* state,
                              const at::Tensor& apply = at::Tensor());

}  // namespace mlcd::worker
