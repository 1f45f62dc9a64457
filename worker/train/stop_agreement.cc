#include "worker/train/stop_agreement.h"

#include <ATen/ATen.h>

namespace mlcd::worker {

StatusOr<bool> AgreeToStop(const std::atomic<bool>& local, Collectives* comm) {
  const bool here = local.load();
  if (comm->world_size() == 1) return here;
  at::Tensor flag = at::full({1}, here ? 1.0f : 0.0f,
                             at::TensorOptions().dtype(at::kFloat).device(comm->device()));
  MLCD_RETURN_IF_ERROR(comm->AllReduce(flag, ReduceOp::kMax));
  return flag.item<float>() > 0.5f;
}

}  // namespace mlcd::worker
