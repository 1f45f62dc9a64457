#include "worker/loss/multilabel_bce.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "worker/loss/partial_fc_state.h"

namespace mlcd::worker {

std::string CheckMultiLabels(const at::Tensor& labels, int64_t rows, int64_t num_classes) {
  if (!labels.defined() || (labels.dim() != 1 && labels.dim() != 2) ||
      (labels.scalar_type() != at::kLong && labels.scalar_type() != at::kInt)) {
    return "labels must be a 1-d or 2-d int64 tensor [n, l] (-1 = padding), got " +
           TensorShapeString(labels);
  }
  if (labels.size(0) != rows) {
    return "labels have " + std::to_string(labels.size(0)) + " rows but there are " +
           std::to_string(rows) + " samples (one row of labels per sample)";
  }
  if (labels.numel() == 0) return "";
  const int64_t max_label = labels.max().item<int64_t>();
  if (max_label >= num_classes) {
    return "label " + std::to_string(max_label) + " is >= the number of classes " +
           std::to_string(num_classes) + " of the head; use -1 for padding";
  }
  return "";
}

at::Tensor MultiHotTargets(const at::Tensor& labels, int64_t num_classes,
                           const at::TensorOptions& options) {
  const int64_t n = labels.size(0);
  const at::Tensor Y =
      (labels.dim() == 1 ? labels.unsqueeze(1) : labels).to(options.device(), at::kLong);
  // One extra column takes the padding, then is dropped.
  at::Tensor hot = at::zeros({n, num_classes + 1}, options);
  hot.scatter_(1, Y.masked_fill(Y < 0, num_classes), 1.0);
  return hot.narrow(1, 0, num_classes);
}

StatusOr<MultiLabelBceResult> MultiLabelBce(Collectives& comm, const at::Tensor& logits,
                                            const at::Tensor& labels) {
  std::string error;
  if (!logits.defined() || logits.dim() != 2 ||
      (logits.scalar_type() != at::kFloat && logits.scalar_type() != at::kDouble)) {
    error =
        "logits must be a 2-d float32 or float64 tensor [n, K], got " + TensorShapeString(logits);
  } else {
    error = CheckMultiLabels(labels, logits.size(0), logits.size(1));
  }
  const bool ok = error.empty();
  const at::TensorOptions opts = ok ? logits.options() : at::TensorOptions(at::kDouble);
  at::Tensor local_sum = at::zeros({}, opts);
  if (ok) {  // an empty batch keeps its (zero) graph, so every rank can backpropagate
    const at::Tensor y = MultiHotTargets(labels, logits.size(1), opts);
    local_sum = at::binary_cross_entropy_with_logits(logits, y, {}, {}, at::Reduction::Sum);
  }
  // K is exchanged as well: a head whose class count differs between ranks is refused.
  const double k = ok ? static_cast<double>(logits.size(1)) : 0.0;
  at::Tensor sums = at::stack(
      {local_sum.detach().to(at::kDouble),
       at::scalar_tensor(ok ? static_cast<double>(logits.size(0)) : 0.0, opts.dtype(at::kDouble)),
       at::scalar_tensor(ok ? 0.0 : 1.0, opts.dtype(at::kDouble)),
       at::scalar_tensor(k, opts.dtype(at::kDouble)),
       at::scalar_tensor(k * k, opts.dtype(at::kDouble))});
  MLCD_RETURN_IF_ERROR(comm.AllReduce(sums, ReduceOp::kSum));
  const at::Tensor host = sums.cpu();
  const double* s = host.data_ptr<double>();
  if (!ok) return Status::InvalidArgument(error);
  if (s[2] > 0) {
    return Status::InvalidArgument(std::to_string(std::llround(s[2])) +
                                   " rank(s) refused their labels or logits (see their error)");
  }
  const double world = comm.world_size();
  // All ranks share K exactly when the mean of K² is the square of the mean of K.
  if (std::abs(s[4] / world - (s[3] / world) * (s[3] / world)) > 0.5) {
    return Status::InvalidArgument("the number of classes K differs between ranks");
  }
  MultiLabelBceResult r;
  r.global_samples = std::llround(s[1]);
  if (r.global_samples == 0)
    return Status::InvalidArgument("the global batch has no sample; BCE needs at least one");
  const double denominator = s[1] * k;
  r.loss = s[0] / denominator;
  if (!std::isfinite(r.loss)) {
    return Status::InvalidArgument("the BCE loss is not finite (" + std::to_string(r.loss) +
                                   "): non-finite logits");
  }
  r.local_term = local_sum / denominator;
  return r;
}

}  // namespace mlcd::worker
