#include "worker/cluster/gang_layout.h"

#include <ATen/ATen.h>

namespace mlcd::worker::cluster {

StatusOr<std::vector<int64_t>> GatherCounts(int64_t value, const at::TensorOptions& device,
                                            Collectives& comm) {
  at::Tensor mine = at::full({1}, value, device.dtype(at::kLong));
  at::Tensor all;
  MLCD_RETURN_IF_ERROR(comm.AllGather(mine, &all));
  all = all.to(at::kCPU).contiguous();
  const int64_t* p = all.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + all.numel());
}

StatusOr<GangLayout> GatherLayout(const at::Tensor& rows, int64_t first_row, Collectives& comm) {
  if (rows.dim() != 2)
    return Status::InvalidArgument("feature rows must be a 2-d tensor, got " +
                                   std::to_string(rows.dim()) + " dimensions");
  at::Tensor mine = at::tensor(std::vector<int64_t>{first_row, rows.size(0), rows.size(1)})
                        .to(rows.device());
  at::Tensor all;
  MLCD_RETURN_IF_ERROR(comm.AllGather(mine, &all));
  all = all.to(at::kCPU).contiguous().view({-1, 3});
  GangLayout layout;
  const int world = comm.world_size();
  const int64_t* p = all.data_ptr<int64_t>();
  layout.d = p[2];
  int64_t expected_first = 0;
  for (int r = 0; r < world; ++r) {
    const int64_t first = p[3 * r], n = p[3 * r + 1], d = p[3 * r + 2];
    if (d != layout.d) {
      return Status::InvalidArgument(
          "feature dimensions differ between ranks: rank 0 has d = " + std::to_string(layout.d) +
          ", rank " + std::to_string(r) + " has d = " + std::to_string(d) +
          "; every feature file of a job must have the same dimension");
    }
    if (first != expected_first || n < 0) {
      return Status::InvalidArgument("rank " + std::to_string(r) + " holds rows [" +
                                     std::to_string(first) + ", " + std::to_string(first + n) +
                                     ") but the rows must continue at " +
                                     std::to_string(expected_first) +
                                     " (contiguous ranges in rank order)");
    }
    layout.first_row.push_back(first);
    layout.rows.push_back(n);
    expected_first = first + n;
  }
  layout.total_rows = expected_first;
  return layout;
}

}  // namespace mlcd::worker::cluster
