#include "clusterd/output_area.h"

#include <utility>

#include "common/data_roots.h"
#include "common/file_util.h"
#include "common/output_area_names.h"

namespace mlcd::clusterd {

StatusOr<OutputAreas> OutputAreas::Make(const std::string& root) {
  OutputAreas areas;
  if (root.empty()) return areas;
  MLCD_RETURN_IF_ERROR(MakeDirs(root));
  MLCD_ASSIGN_OR_RETURN(DataRoots resolved, DataRoots::Make({root}));
  areas.root_ = resolved.roots().front();
  return areas;
}

StatusOr<std::vector<std::string>> OutputAreas::MakeAreaFolders() const {
  if (!enabled()) return std::vector<std::string>{};
  std::vector<std::string> dirs;
  for (const char* sub : {"/jobs", "/features", "/users"}) {
    dirs.push_back(root_ + sub);
    MLCD_RETURN_IF_ERROR(MakeDirs(dirs.back()));
  }
  return dirs;
}

std::string OutputAreas::AreaOf(const ActingFor& acting) const {
  return OutputAreaOf(root_, acting.identity);
}

Status OutputAreas::CheckWrite(const std::string& resolved, const std::string& field,
                               const ActingFor& acting) const {
  if (!enabled()) return Status::Ok();
  const std::string area = AreaOf(acting);
  if (InsideArea(resolved, area)) return Status::Ok();
  const bool job = acting.identity.rfind(kJobIdentityPrefix, 0) == 0;
  if (job && InsideArea(resolved, root_ + "/features")) return Status::Ok();
  return Status(StatusCode::kPermissionDenied,
                field + ": '" + resolved + "' is not in the output area of '" +
                    (acting.identity.empty() ? "anonymous" : acting.identity) +
                    "': mlcd-clusterd writes a caller's outputs only under " + area +
                    "/ (its --output-root, one folder per identity, so no call replaces a file "
                    "another identity made); name a path there");
}

Status CheckFeatureOutputs(const v1::FeatureSource& source, const PathResolver& resolve,
                           const OutputAreas& areas, const ActingFor& acting) {
  if (!source.has_generate()) return Status::Ok();
  const v1::GeneratedFeatures& g = source.generate();
  for (const auto& [path, field] : {std::pair{g.features_out(), "features.generate.features_out"},
                                    std::pair{g.labels_out(), "features.generate.labels_out"}}) {
    if (path.empty()) continue;
    MLCD_ASSIGN_OR_RETURN(const std::string resolved, resolve(path, field));
    MLCD_RETURN_IF_ERROR(areas.CheckWrite(resolved, field, acting));
  }
  return Status::Ok();
}

}  // namespace mlcd::clusterd
