// The feature source of a Cluster or Assign request (mlcd.v1.FeatureSource), turned into the
// shard paths the job reads: .npy shards named by the caller, or round-0 features clusterd
// writes itself from an image dataset (clusterd/feature_gen.h) and then reads as one shard.
//
//   MLCD_RETURN_IF_ERROR(CheckFeatureSource(request.features()));   // before queueing
//   ...
//   MLCD_ASSIGN_OR_RETURN(FeatureInputs in, PrepareFeatures(request.features(), resolve, note,
//                                                            should_stop));
//   MLCD_ASSIGN_OR_RETURN(FeatureShards shards, FeatureShards::Open(in.paths, in.ids_paths));
//
// Generated features are a cache shared by calls: both files present = complete (the labels
// file is written last), and they are then read as they are. Row i is sample id i, the i-th
// image of the split (docs/clusterd.md).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/clusterd.pb.h"

namespace mlcd::clusterd {

// Request checks that need no data: INVALID_ARGUMENT naming the field (also: at most
// kMaxSpecListLength paths, generated dim at most kMaxProjectionDim).
Status CheckFeatureSource(const v1::FeatureSource& source);

struct FeatureInputs {
  std::vector<std::string> paths;      // shard files or directories, resolved
  std::vector<std::string> ids_paths;  // resolved
};

// Resolves a request's path (relative -> under the daemon's data dir, then confined to its
// data roots); `field` names the path in errors.
using PathResolver =
    std::function<StatusOr<std::string>(const std::string& path, const std::string& field)>;

// Resolves the source's paths with `resolve` (its first error is returned) and,
// for `generate`, writes the features first unless the cache is complete (`note` hears
// "writing round-0 <kind> features of <dataset>" then). Errors of the writer come back with
// the context "writing round-0 features".
StatusOr<FeatureInputs> PrepareFeatures(const v1::FeatureSource& source,
                                        const PathResolver& resolve,
                                        const std::function<void(const std::string&)>& note);

}  // namespace mlcd::clusterd
