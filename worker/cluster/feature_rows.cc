#include "worker/cluster/feature_rows.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "worker/cluster/gang_kmeans.h"

namespace mlcd::worker::cluster {
namespace {

// Generated rows are computed in blocks of this many images, in parallel.
constexpr int64_t kGeneratedBlock = 256;

}  // namespace

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

StatusOr<FeatureRows> FeatureRows::OpenGenerated(const v1::GeneratedFeatures& generated) {
  MLCD_ASSIGN_OR_RETURN(FashionMnistFeatureSpec spec, FashionMnistSpecOf(generated));
  MLCD_ASSIGN_OR_RETURN(FashionMnistShape shape, ReadFashionMnistShape(spec));
  MLCD_ASSIGN_OR_RETURN(FashionMnistFeatureMap map,
                        FashionMnistFeatureMap::Create(spec, shape.pixels_per_image));
  MLCD_ASSIGN_OR_RETURN(std::vector<uint8_t> classes, ReadIdxLabels(shape.labels_path, shape.rows));
  FeatureRows out;
  out.total_rows_ = shape.rows;
  out.d_ = map.d();
  out.generated_ = Generated{std::move(shape), std::move(map), std::move(classes)};
  return out;
}

StatusOr<at::Tensor> FeatureRows::ComputeGenerated(int64_t begin, int64_t end) const {
  const Generated& g = *generated_;
  MLCD_ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(g.shape.images_path, end));
  if (images.count < end) {
    return Status::DataLoss(g.shape.images_path + " holds " + std::to_string(images.count) +
                            " images, but its labels file " + g.shape.labels_path + " holds " +
                            std::to_string(total_rows_) + ": the dataset is damaged");
  }
  at::Tensor out = at::empty({end - begin, d_}, at::kFloat);
  const int64_t ppi = g.map.pixels_per_image();
  at::parallel_for(begin, end, kGeneratedBlock, [&](int64_t b, int64_t e) {
    g.map.Compute(images.pixels.data() + b * ppi, e - b, out.data_ptr<float>() + (b - begin) * d_);
  });
  return out;
}

StatusOr<at::Tensor> FeatureRows::Read(int64_t begin, int64_t end,
                                        const at::Device& device) const {
  if (generated_) {
    MLCD_ASSIGN_OR_RETURN(at::Tensor out, ComputeGenerated(begin, end));
    NormalizeRowsInPlace(out);
    return out.to(device);
  }
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

std::vector<int64_t> FeatureRows::Classes(int64_t begin, int64_t end) const {
  if (!generated_) return {};
  return std::vector<int64_t>(generated_->classes.begin() + begin,
                              generated_->classes.begin() + end);
}

}  // namespace mlcd::worker::cluster
