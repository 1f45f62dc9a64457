#include "worker/train/grad_sync.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace mlcd::worker {

GradSync::GradSync(Collectives* comm, FlatParameters* params, GradSyncOptions options)
    : comm_(comm), params_(params), options_(options) {
  options_.bucket_bytes = std::max<int64_t>(4096, options_.bucket_bytes);
}

int GradSync::num_buckets() const {
  const int64_t per = options_.bucket_bytes / static_cast<int64_t>(sizeof(float));
  return static_cast<int>((params_->numel() + per - 1) / per);
}

Status GradSync::AllReduceGradients() {
  last_seconds_ = 0;
  if (comm_->world_size() <= 1) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  const int64_t per = options_.bucket_bytes / static_cast<int64_t>(sizeof(float));
  torch::Tensor& grads = params_->grads();
  const int64_t n = grads.numel();
  for (int64_t begin = 0; begin < n; begin += per) {
    torch::Tensor bucket = grads.slice(0, begin, std::min(n, begin + per));
    Status st = comm_->AllReduce(bucket, ReduceOp::kSum);
    if (!st.ok()) return st.WithContext("allreduce of backbone gradients");
  }
  last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

Status GradSync::BroadcastParameters() {
  if (comm_->world_size() <= 1) return Status::Ok();
  std::vector<at::Tensor> tensors{params_->values()};
  Status st = comm_->Broadcast(tensors, 0);
  if (!st.ok()) return st.WithContext("broadcast of the initial backbone weights from rank 0");
  if (tensors[0].data_ptr() != params_->values().data_ptr()) {
    torch::NoGradGuard no_grad;
    params_->values().copy_(tensors[0]);
  }
  return Status::Ok();
}

Status GradSync::CheckParametersInSync() {
  if (comm_->world_size() <= 1) return Status::Ok();
  torch::NoGradGuard no_grad;
  // Sum and max of a fingerprint: equal on every rank iff max - min == 0 for each entry.
  const torch::Tensor& v = params_->values();
  torch::Tensor fp = torch::stack(
      {v.sum().to(torch::kDouble), v.abs().sum().to(torch::kDouble),
       (v * torch::arange(v.numel(), v.options()).remainder(97)).sum().to(torch::kDouble)});
  torch::Tensor mx = fp.clone(), mn = fp.clone();
  MLCD_RETURN_IF_ERROR(comm_->AllReduce(mx, ReduceOp::kMax));
  MLCD_RETURN_IF_ERROR(comm_->AllReduce(mn, ReduceOp::kMin));
  if (!torch::equal(mx, mn)) {
    return Status::FailedPrecondition("backbone weights differ between ranks (fingerprints " +
                                      std::to_string(mn[0].item<double>()) + " vs " +
                                      std::to_string(mx[0].item<double>()) + ")");
  }
  return Status::Ok();
}

}  // namespace mlcd::worker
