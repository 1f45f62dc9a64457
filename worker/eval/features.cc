#include "worker/eval/features.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/confined_file.h"
#include "common/even_split.h"
#include "common/file_util.h"
#include "common/npy.h"

namespace mlcd::worker {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "<x>.npy" -> "<x><suffix>" (e.g. ".labels.npy").
std::string Sibling(const std::string& shard, const std::string& suffix) {
  std::string base = EndsWith(shard, ".npy") ? shard.substr(0, shard.size() - 4) : shard;
  return base + suffix;
}

}  // namespace

void L2NormalizeRows(float* values, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* r = values + i * cols;
    double ss = 0;
    for (int64_t j = 0; j < cols; ++j) ss += static_cast<double>(r[j]) * r[j];
    if (ss <= 0) continue;
    float inv = static_cast<float>(1.0 / std::sqrt(ss));
    for (int64_t j = 0; j < cols; ++j) r[j] *= inv;
  }
}

void L2NormalizeRows(FeatureMatrix* matrix) {
  L2NormalizeRows(matrix->values.data(), matrix->rows, matrix->cols);
}

void ContiguousPart(int64_t total, int rank, int world_size, int64_t* begin, int64_t* end) {
  *begin = EvenSplitBegin(total, world_size, rank);
  *end = EvenSplitBegin(total, world_size, rank + 1);
}

EmbeddingShardFiles EmbeddingShardNames(const std::string& dir, int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof(name), "embeddings-%05d-of-%05d", rank, world_size);
  std::string base = dir + "/" + name;
  return {base + ".npy", base + ".ids.npy", base + ".labels.npy"};
}

Status WriteEmbeddingShard(const std::string& dir, int rank, int world_size,
                           const FeatureMatrix& features, const std::vector<int64_t>& ids,
                           const std::vector<int64_t>* labels) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return Status::InvalidArgument("embedding shard: rank " + std::to_string(rank) +
                                   " is outside world size " + std::to_string(world_size));
  if (static_cast<int64_t>(features.values.size()) != features.rows * features.cols)
    return Status::InvalidArgument("embedding shard: matrix holds " +
                                   std::to_string(features.values.size()) +
                                   " values, not rows x cols");
  if (static_cast<int64_t>(ids.size()) != features.rows)
    return Status::InvalidArgument("embedding shard: " + std::to_string(ids.size()) + " ids for " +
                                   std::to_string(features.rows) + " rows");
  if (labels && static_cast<int64_t>(labels->size()) != features.rows)
    return Status::InvalidArgument("embedding shard: " + std::to_string(labels->size()) +
                                   " labels for " + std::to_string(features.rows) + " rows");
  MLCD_RETURN_IF_ERROR(MakeConfinedDirs(dir));
  EmbeddingShardFiles files = EmbeddingShardNames(dir, rank, world_size);
  // Ids and labels first: a reader that sees the feature shard also sees its companions.
  MLCD_RETURN_IF_ERROR(WriteNpy(files.ids, NpyDtype::kInt64, {features.rows}, ids.data()));
  if (labels)
    MLCD_RETURN_IF_ERROR(WriteNpy(files.labels, NpyDtype::kInt64, {features.rows}, labels->data()));
  return WriteNpy(files.features, NpyDtype::kFloat32, {features.rows, features.cols},
                  features.values.data());
}

StatusOr<std::vector<std::string>> ExpandFeatureShards(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& path : paths) {
    if (!PathExists(path)) return Status::NotFound(path + ": no such feature file or directory");
    if (!IsDirectory(path)) {
      out.push_back(path);
      continue;
    }
    DIR* d = opendir(path.c_str());
    if (!d) return Status::InvalidArgument(path + ": cannot list the directory");
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (EndsWith(name, ".npy") && !EndsWith(name, ".ids.npy") && !EndsWith(name, ".labels.npy"))
        names.push_back(name);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    if (names.empty())
      return Status::InvalidArgument(path + ": directory holds no feature shards (*.npy)");
    for (const std::string& n : names) out.push_back(path + "/" + n);
  }
  if (out.empty()) return Status::InvalidArgument("no feature files given");
  return out;
}

StatusOr<LabelledFeatures> LoadLabelledFeatures(const std::vector<std::string>& paths,
                                                const std::vector<std::string>& labels_paths,
                                                bool require_labels) {
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandFeatureShards(paths));
  if (!labels_paths.empty() && labels_paths.size() != 1 && labels_paths.size() != shards.size())
    return Status::InvalidArgument(std::to_string(labels_paths.size()) + " label files for " +
                                   std::to_string(shards.size()) +
                                   " feature shards: give one per shard, or one for all rows");
  LabelledFeatures out;
  bool all_ids = true, all_labels = true;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string& shard = shards[s];
    std::vector<int64_t> shape;
    MLCD_ASSIGN_OR_RETURN(std::vector<float> values, ReadNpyAsFloat32(shard, &shape));
    if (shape.size() != 2)
      return Status::InvalidArgument(shard + ": expected a 2-d feature array (rows x dim), got " +
                                     std::to_string(shape.size()) + "-d");
    if (s == 0) out.features.cols = shape[1];
    if (shape[1] != out.features.cols)
      return Status::InvalidArgument(shard + ": dimension " + std::to_string(shape[1]) +
                                     " differs from " + std::to_string(out.features.cols) + " of " +
                                     shards[0]);
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i]))
        return Status::InvalidArgument(shard + ": row " +
                                       std::to_string(static_cast<int64_t>(i) / shape[1]) +
                                       " holds NaN or Inf");
    }
    out.features.values.insert(out.features.values.end(), values.begin(), values.end());
    out.features.rows += shape[0];
    if (labels_paths.size() != 1) {
      std::string lp = labels_paths.empty() ? Sibling(shard, ".labels.npy") : labels_paths[s];
      if (!require_labels && labels_paths.empty() && !PathExists(lp)) all_labels = false;
      if (all_labels) {
        if (!PathExists(lp))
          return Status::NotFound(
              lp + ": class labels of " + shard +
              " not found (give them with --*-labels, one .npy of integers per shard)");
        MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> labels, ReadNpyAsInt64(lp));
        if (static_cast<int64_t>(labels.size()) != shape[0])
          return Status::InvalidArgument(lp + ": " + std::to_string(labels.size()) +
                                         " labels for the " + std::to_string(shape[0]) +
                                         " rows of " + shard);
        out.labels.insert(out.labels.end(), labels.begin(), labels.end());
      }
    }
    std::string idp = Sibling(shard, ".ids.npy");
    if (all_ids && PathExists(idp)) {
      MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> ids, ReadNpyAsInt64(idp));
      if (static_cast<int64_t>(ids.size()) != shape[0])
        return Status::InvalidArgument(idp + ": " + std::to_string(ids.size()) + " ids for the " +
                                       std::to_string(shape[0]) + " rows of " + shard);
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    } else {
      all_ids = false;
    }
  }
  if (!all_ids) out.ids.clear();
  if (!all_labels) out.labels.clear();
  if (labels_paths.size() == 1) {
    MLCD_ASSIGN_OR_RETURN(out.labels, ReadNpyAsInt64(labels_paths[0]));
    if (static_cast<int64_t>(out.labels.size()) != out.features.rows)
      return Status::InvalidArgument(labels_paths[0] + ": " + std::to_string(out.labels.size()) +
                                     " labels for " + std::to_string(out.features.rows) +
                                     " feature rows");
  }
  for (size_t i = 0; i < out.labels.size(); ++i) {
    if (out.labels[i] < 0)
      return Status::InvalidArgument("class label of row " + std::to_string(i) + " is negative (" +
                                     std::to_string(out.labels[i]) + ")");
  }
  return out;
}

int NumClassesOf(const std::vector<int64_t>& labels) {
  int64_t m = -1;
  for (int64_t v : labels) m = std::max(m, v);
  return static_cast<int>(m + 1);
}

}  // namespace mlcd::worker
