#include "worker/dist/host_ranks.h"

#include <unistd.h>

#include <torch/torch.h>

#include <fstream>
#include <functional>
#include <string>

namespace mlcd::worker {

int64_t HostId() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string id = name;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (boot >> boot_id) id += "/" + boot_id;
  return static_cast<int64_t>(std::hash<std::string>()(id));
}

StatusOr<int> RanksOnThisHost(Collectives* comm) {
  const int64_t mine = HostId();
  at::Tensor all;
  MLCD_RETURN_IF_ERROR(comm->AllGather(
      torch::full({1}, mine, torch::TensorOptions().dtype(torch::kInt64).device(comm->device())),
      &all));
  return static_cast<int>((all == mine).sum().item<int64_t>());
}

}  // namespace mlcd::worker
