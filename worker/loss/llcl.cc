#include "worker/loss/llcl.h"

#include <ATen/ATen.h>

#include <string>

#include "worker/loss/multilabel_bce.h"
#include "worker/loss/partial_fc_state.h"

namespace mlcd::worker {

StatusOr<LlclStep> LlclForwardBackward(const LlclOptions& options, Collectives& comm,
                                       const at::Tensor& z, const at::Tensor& labels) {
  ContrastiveOptions co;
  co.variant = ContrastiveVariant::kSupConAll;
  co.temperature = options.temperature;
  co.views = 1;
  co.small_batch_is_zero = true;
  MLCD_RETURN_IF_ERROR(ValidateContrastiveOptions(co));
  std::string error;
  if (!z.defined() || z.dim() != 3) {
    error = "label-level embeddings must be a 3-d tensor [n, L, d_z], got " + TensorShapeString(z);
  } else {
    error = CheckMultiLabels(labels, z.size(0), z.size(1));
  }
  if (!error.empty()) {
    // Every rank must take part in the exchange: an undefined tensor is refused there, on
    // every rank, and this rank reports what it found.
    (void)ContrastiveForwardBackward(co, comm, at::Tensor(), at::Tensor());
    return Status::InvalidArgument(error);
  }
  const int64_t n = z.size(0), L = z.size(1), dz = z.size(2);
  // The active (image, label) pairs in row-major order: row i·L + j of z viewed as [n·L, d_z].
  const at::Tensor active =
      MultiHotTargets(labels, L, z.options().dtype(at::kBool)).reshape({n * L}).nonzero().view(-1);
  const at::Tensor rows = z.reshape({n * L, dz}).index_select(0, active);
  const at::Tensor row_labels = active.remainder(L).unsqueeze(1);
  MLCD_ASSIGN_OR_RETURN(ContrastiveStep step,
                        ContrastiveForwardBackward(co, comm, rows, row_labels));
  LlclStep out;
  out.loss = step.loss;
  out.stats = step.stats;
  out.grad_embeddings = at::zeros({n * L, dz}, z.options())
                            .index_copy_(0, active, step.grad_embeddings)
                            .view({n, L, dz});
  return out;
}

}  // namespace mlcd::worker
