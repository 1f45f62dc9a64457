#include "worker/cluster/feature_rows.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "worker/cluster/gang_kmeans.h"

namespace mlcd::worker::cluster {

StatusOr<FeatureRows> FeatureRows::Open(const std::vector<std::string>& paths) {
  if (paths.empty()) return Status::InvalidArgument("no feature files given");
  FeatureRows out;
  for (const std::string& path : paths) {
    MLCD_ASSIGN_OR_RETURN(MappedNpy map, MappedNpy::Open(path));
    MLCD_RETURN_IF_ERROR(map.Expect2d({NpyDtype::kFloat32, NpyDtype::kFloat16}));
    if (out.shards_.empty()) {
      out.d_ = map.cols();
    } else if (map.cols() != out.d_) {
      return Status::InvalidArgument("feature dimensions differ: " + paths.front() + " has d = " +
                                     std::to_string(out.d_) + ", " + path + " has d = " +
                                     std::to_string(map.cols()) +
                                     "; every feature file of a job must have the same dimension");
    }
    out.first_row_.push_back(out.total_rows_);
    out.total_rows_ += map.rows();
    out.shards_.push_back(std::move(map));
  }
  if (out.total_rows_ < 1 || out.d_ < 1)
    return Status::InvalidArgument("the feature files hold no rows (or d = 0)");
  return out;
}

at::Tensor FeatureRows::Read(int64_t begin, int64_t end, const at::Device& device) const {
  at::Tensor out = at::empty({end - begin, d_}, at::kFloat);
  for (size_t s = 0; s < shards_.size(); ++s) {
    const int64_t s0 = first_row_[s], s1 = s0 + shards_[s].rows();
    const int64_t b = std::max(begin, s0), e = std::min(end, s1);
    if (b >= e) continue;
    float* dst = out.data_ptr<float>() + (b - begin) * d_;
    const size_t count = static_cast<size_t>((e - b) * d_);
    if (shards_[s].dtype() == NpyDtype::kFloat32) {
      std::copy_n(shards_[s].data_as<float>() + (b - s0) * d_, count, dst);
    } else {
      HalfToFloatN(shards_[s].data_as<uint16_t>() + (b - s0) * d_, dst, count);
    }
  }
  NormalizeRowsInPlace(out);
  return out.to(device);
}

}  // namespace mlcd::worker::cluster
