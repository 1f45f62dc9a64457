#include "clusterd/feature_request.h"

#include "clusterd/feature_gen.h"
#include "common/file_util.h"
#include "common/limits.h"

namespace mlcd::clusterd {

Status CheckFeatureSource(const v1::FeatureSource& source) {
  if (source.paths_size() > kMaxSpecListLength || source.ids_paths_size() > kMaxSpecListLength)
    return Status::InvalidArgument("features: at most " + std::to_string(kMaxSpecListLength) +
                                   " paths and ids_paths");
  if (!source.has_generate()) {
    if (source.paths_size() == 0)
      return Status::InvalidArgument(
          "features.paths is empty: give .npy shard files or directories");
    return Status::Ok();
  }
  const v1::GeneratedFeatures& g = source.generate();
  if (source.paths_size() > 0 || source.ids_paths_size() > 0)
    return Status::InvalidArgument(
        "features: set either paths (and ids_paths) or generate, not both");
  if (g.features_out().empty())
    return Status::InvalidArgument(
        "features.generate.features_out is required: the .npy path to write the features to");
  if (g.dim() < 0 || g.dim() > kMaxProjectionDim)
    return Status::InvalidArgument("features.generate.dim: " + std::to_string(g.dim()) +
                                   " is not in [0, " + std::to_string(kMaxProjectionDim) +
                                   "] (0 = default)");
  if (!g.dataset_format().empty() && g.dataset_format() != "fashion-mnist")
    return Status::InvalidArgument("features.generate.dataset_format: '" + g.dataset_format() +
                                   "' is not supported; use fashion-mnist");
  return Status::Ok();
}

StatusOr<FeatureInputs> PrepareFeatures(const v1::FeatureSource& source,
                                        const PathResolver& resolve,
                                        const std::function<void(const std::string&)>& note) {
  FeatureInputs in;
  if (!source.has_generate()) {
    for (int i = 0; i < source.paths_size(); ++i) {
      MLCD_ASSIGN_OR_RETURN(std::string p,
                            resolve(source.paths(i), "features.paths[" + std::to_string(i) + "]"));
      in.paths.push_back(std::move(p));
    }
    for (int i = 0; i < source.ids_paths_size(); ++i) {
      MLCD_ASSIGN_OR_RETURN(
          std::string p,
          resolve(source.ids_paths(i), "features.ids_paths[" + std::to_string(i) + "]"));
      in.ids_paths.push_back(std::move(p));
    }
    return in;
  }
  const v1::GeneratedFeatures& g = source.generate();
  FashionMnistFeatureOptions opt;
  opt.kind = g.kind();
  if (!g.split().empty()) opt.split = g.split();
  opt.limit = static_cast<int64_t>(g.limit());
  if (g.dim() != 0) opt.dim = g.dim();
  opt.seed = g.seed();
  if (!g.dataset_path().empty()) {
    MLCD_ASSIGN_OR_RETURN(opt.dataset_dir,
                          resolve(g.dataset_path(), "features.generate.dataset_path"));
  } else {
    MLCD_RETURN_IF_ERROR(resolve(opt.dataset_dir, "features.generate.dataset_path").status());
  }
  MLCD_ASSIGN_OR_RETURN(opt.features_out,
                        resolve(g.features_out(), "features.generate.features_out"));
  if (!g.labels_out().empty()) {
    MLCD_ASSIGN_OR_RETURN(opt.labels_out, resolve(g.labels_out(), "features.generate.labels_out"));
  }
  // The labels file is written last: when it exists, both are complete.
  const bool complete =
      PathExists(opt.features_out) && (opt.labels_out.empty() || PathExists(opt.labels_out));
  if (!complete) {
    const std::string dataset = g.dataset_format().empty() ? "fashion-mnist" : g.dataset_format();
    if (note) note("writing round-0 " + opt.kind + " features of " + dataset);
    auto info = WriteFashionMnistFeatures(opt);
    if (!info.ok()) return info.status().WithContext("writing round-0 features");
  }
  in.paths.push_back(opt.features_out);
  return in;
}

}  // namespace mlcd::clusterd
