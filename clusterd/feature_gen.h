// Feature files for clustering when no embedding model exists yet: round-0 features of
// Fashion-MNIST (from the Debian package dataset-fashion-mnist) and synthetic mixtures of
// Gaussians on the unit sphere with known centres (tests, demos, benchmarks).
//
// This interface is stable: clusterd's service writes round-0 features through it when a
// request asks for them (FeatureSource.generate, clusterd/feature_request.h).
//
//   FashionMnistFeatureOptions opt;
//   opt.features_out = dir + "/features.npy";
//   opt.labels_out = dir + "/classes.labels.npy";   // optional, evaluation only
//   MLCD_ASSIGN_OR_RETURN(FeatureFileInfo info, WriteFashionMnistFeatures(opt));
//
// Row i of every file written is sample id i: the i-th image of the split (docs/contracts.md,
// "sample id = row index").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/fashion_mnist_features.h"
#include "common/idx.h"
#include "common/npy.h"
#include "common/status.h"

namespace mlcd::clusterd {

// The rows are those of common/fashion_mnist_features.h (the clustering gang computes the same
// values for its own row ranges).
struct FashionMnistFeatureOptions : FashionMnistFeatureSpec {
  // What to make (kind, split, limit, dim, seed, dataset_dir): FashionMnistFeatureSpec.
  // float32 or float16.
  NpyDtype dtype = NpyDtype::kFloat32;
  // Output .npy (n x d), written atomically. Required.
  std::string features_out;
  // Optional output .npy of the class labels (int64, n), for label-quality reports only:
  // training never reads it.
  std::string labels_out;
};

struct FeatureFileInfo {
  std::vector<std::string> feature_paths;  // shards written, in order
  std::string labels_path;                 // empty when not written
  std::string centres_path;                // synthetic only
  int64_t rows = 0;
  int d = 0;
};

// Reads the split with common/idx.h and writes the features (and labels). NOT_FOUND with an
// install hint when the dataset is missing; INVALID_ARGUMENT on bad options.
StatusOr<FeatureFileInfo> WriteFashionMnistFeatures(const FashionMnistFeatureOptions& options);

struct SyntheticMixtureOptions {
  // Rows in total and their dimension.
  int64_t rows = 10000;
  int dim = 32;
  // Mixture components: centres drawn uniformly on the unit sphere.
  int num_centres = 16;
  // A row is normalise(centre + noise * g / sqrt(dim)) with g ~ N(0, I): its expected cosine
  // to its centre is about 1 / sqrt(1 + noise^2).
  double noise = 0.5;
  uint64_t seed = 1;
  // Rows are split into this many shards of (nearly) equal size.
  int shards = 1;
  NpyDtype dtype = NpyDtype::kFloat32;
  // Directory receiving shard-00000.npy, shard-00001.npy, ... Required; created if needed.
  std::string out_dir;
  // Optional: the centres (.npy float32, num_centres x dim) and every row's component
  // (.npy int64, rows). Give paths outside out_dir or ending in .labels.npy, so a directory
  // listing of out_dir does not take them for feature shards.
  std::string centres_out;
  std::string labels_out;
};

// Writes the mixture. The same options always give the same bytes (independent of threads).
StatusOr<FeatureFileInfo> WriteSyntheticMixture(const SyntheticMixtureOptions& options);

// The mixture's centres (num_centres x dim, unit rows) and rows' components, computed in
// memory exactly as WriteSyntheticMixture() writes them (for tests).
void SyntheticMixtureCentres(const SyntheticMixtureOptions& options, std::vector<float>* centres);
void SyntheticMixtureRows(const SyntheticMixtureOptions& options, int64_t begin, int64_t end,
                          float* rows, int64_t* components);

}  // namespace mlcd::clusterd
