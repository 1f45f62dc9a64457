#include "coordinator/dataset_checks.h"

#include <google/protobuf/util/message_differencer.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "common/dataset/dataset_index.h"
#include "common/dataset/feature_keys.h"
#include "common/dataset/webdataset.h"
#include "common/enums.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/spec_defaults.h"

namespace mlcd::coordinator {
namespace {

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

// The index's files must be the dataset the spec names (when it names one).
Status CheckIndexMatchesPaths(const v1::DatasetSpec& d, const DatasetIndex& index,
                              const std::string& field, const DataRoots* roots) {
  std::vector<std::string> paths;
  if (!d.path().empty()) paths.push_back(d.path());
  for (const auto& p : d.paths()) paths.push_back(p);
  if (paths.empty()) return Status::Ok();
  if (index.format == DatasetFormat::kImageFolder) {
    const std::string root = RealPath(paths[0]) + "/";
    for (const auto& f : index.files) {
      if (f.path.compare(0, root.size(), root) != 0) {
        return Status::InvalidArgument(field + ": the index holds '" + f.path +
                                       "', which is not under dataset.path '" + paths[0] +
                                       "'; index that folder or drop dataset.path");
      }
    }
    return Status::Ok();
  }
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandShardPaths(paths, roots));
  std::set<std::string> named, indexed;
  for (const auto& s : shards) named.insert(RealPath(s));
  for (const auto& f : index.files) indexed.insert(f.path);
  if (named != indexed) {
    return Status::InvalidArgument(
        field + ": the index covers " + std::to_string(indexed.size()) +
        " shards, dataset.path/paths name " + std::to_string(named.size()) +
        " other or more; rebuild the index from these paths or drop them from the spec");
  }
  return Status::Ok();
}

StatusOr<DatasetIndex> LoadChecked(const v1::DatasetSpec& d, const std::string& dir,
                                   const std::string& field, const DataRoots* roots) {
  if (dir.empty()) {
    return Status::InvalidArgument(field +
                                   ": empty; build an index with `mlcdctl dataset index "
                                   "--format " +
                                   d.format() + " --path ... --out DIR` and give DIR here");
  }
  StatusOr<DatasetIndex> index = LoadDatasetIndex(dir, /*check_fingerprint=*/true, roots);
  if (!index.ok()) return index.status().WithContext(field);
  if (DatasetFormatName(index->format) != d.format()) {
    return Status::InvalidArgument(field + ": '" + dir + "' indexes a " +
                                   DatasetFormatName(index->format) +
                                   " dataset, but dataset.format is '" + d.format() + "'");
  }
  return index;
}

Status CheckFeatures(const v1::JobSpec& spec, const DatasetIndex& index, const DataRoots* roots) {
  const auto& f = spec.clustering().features();
  if (f.kind() != "npy") return Status::Ok();
  const std::string field = "spec.clustering.features";
  std::vector<std::string> paths(f.paths().begin(), f.paths().end());
  StatusOr<std::vector<NpyShardRows>> shards = ListNpyShardRows(paths, roots);
  if (!shards.ok()) return shards.status().WithContext(field + ".paths");
  int64_t rows = 0;
  for (const auto& s : *shards) rows += s.rows;
  if (f.keys().empty()) return CheckFeatureRows(index, *shards).WithContext(field);
  StatusOr<std::vector<int64_t>> aligned = AlignFeatureKeys(index, f.keys(), rows, roots);
  return aligned.ok() ? Status::Ok() : aligned.status().WithContext(field + ".keys");
}

// The files of a dataset given by paths, stat'ed (image-folder: indexed, which only lists and
// stats; webdataset: the expanded shards, and the annotations.json beside them when there is
// one, so that changed annotations make a new index).
StatusOr<std::vector<IndexedFile>> DatasetFiles(DatasetFormat format,
                                                const std::vector<std::string>& paths,
                                                DatasetIndex* folder_index,
                                                const DataRoots* roots) {
  if (format == DatasetFormat::kImageFolder) {
    MLCD_ASSIGN_OR_RETURN(*folder_index, BuildDatasetIndex(format, paths, roots));
    return folder_index->files;
  }
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandShardPaths(paths, roots));
  std::vector<IndexedFile> files;
  for (const auto& s : shards) {
    MLCD_ASSIGN_OR_RETURN(IndexedFile f, StatIndexedFile(s));
    files.push_back(std::move(f));
  }
  const std::string annotations = AnnotationsPathBeside(shards);
  if (PathExists(annotations)) {
    MLCD_ASSIGN_OR_RETURN(IndexedFile f, StatIndexedFile(annotations));
    files.push_back(std::move(f));
  }
  return files;
}

// The coordinator's index of `d` (see ResolveDatasetIndexes): its directory.
StatusOr<std::string> CoordinatorIndex(const std::string& data_dir, const v1::DatasetSpec& d,
                                       const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(DatasetFormat format, ParseDatasetFormat(d.format()));
  std::vector<std::string> paths;
  if (!d.path().empty()) paths.push_back(d.path());
  for (const auto& p : d.paths()) paths.push_back(p);
  DatasetIndex folder;
  MLCD_ASSIGN_OR_RETURN(std::vector<IndexedFile> files,
                        DatasetFiles(format, paths, &folder, roots));
  uint64_t h = Fnv1a(d.format());
  for (const auto& f : files) {
    h = Fnv1a(f.path + "\t" + std::to_string(f.size) + "\t" + std::to_string(f.mtime_ns), h);
  }
  char name[32];
  std::snprintf(name, sizeof(name), "-%016llx", static_cast<unsigned long long>(h));
  const std::string dir = data_dir + "/datasets/" + d.format() + name;
  if (LoadDatasetIndex(dir, /*check_fingerprint=*/true).ok()) return dir;
  DatasetIndex index;
  if (format == DatasetFormat::kImageFolder) {
    index = std::move(folder);
  } else {
    MLCD_ASSIGN_OR_RETURN(index, BuildDatasetIndex(format, paths, roots));
  }
  MLCD_RETURN_IF_ERROR(WriteDatasetIndex(index, dir));
  MLCD_LOG(INFO) << "built the dataset index " << dir << ": " << index.Describe();
  return dir;
}

}  // namespace

Status ResolveDatasetIndexes(const std::string& data_dir, v1::JobSpec* spec,
                             const DataRoots* roots) {
  v1::DatasetSpec* d = spec->mutable_dataset();
  if (data_dir.empty() || !IsIndexedFormat(d->format()) || !d->index().empty() ||
      (d->path().empty() && d->paths().empty()))
    return Status::Ok();
  StatusOr<std::string> dir = CoordinatorIndex(data_dir, *d, roots);
  if (!dir.ok()) return dir.status().WithContext("spec.dataset.path");
  v1::DatasetSpec* e = spec->mutable_evaluation()->mutable_dataset();
  if (e->index().empty() && e->format() == d->format() && e->path() == d->path() &&
      google::protobuf::util::MessageDifferencer::Equals(*e, *d)) {
    e->set_index(*dir);
  }
  d->set_index(*dir);
  return Status::Ok();
}

Status CheckDatasetInputs(const v1::JobSpec& spec, const DataRoots* roots) {
  const v1::DatasetSpec& d = spec.dataset();
  if (IsIndexedFormat(d.format())) {
    MLCD_ASSIGN_OR_RETURN(DatasetIndex index,
                          LoadChecked(d, d.index(), "spec.dataset.index", roots));
    MLCD_RETURN_IF_ERROR(CheckIndexMatchesPaths(d, index, "spec.dataset.index", roots));
    const int64_t n = index.size();
    if (spec.clustering().k() > n) {
      return Status::InvalidArgument("spec.clustering.k: " + std::to_string(spec.clustering().k()) +
                                     " > the " + std::to_string(n) +
                                     " samples of the dataset index; k-means needs at least k "
                                     "points");
    }
    if (spec.training().batch_size() > n) {
      return Status::InvalidArgument(
          "spec.training.batch_size: " + std::to_string(spec.training().batch_size()) + " > the " +
          std::to_string(n) + " samples of the dataset index");
    }
    MLCD_RETURN_IF_ERROR(CheckFeatures(spec, index, roots));
  }
  const auto& e = spec.evaluation();
  if (e.enabled() && IsIndexedFormat(e.dataset().format())) {
    MLCD_RETURN_IF_ERROR(
        LoadChecked(e.dataset(), e.dataset().index(), "spec.evaluation.dataset.index", roots)
            .status());
    MLCD_RETURN_IF_ERROR(LoadChecked(e.dataset(), e.dataset().test_index(),
                                     "spec.evaluation.dataset.test_index", roots)
                             .status());
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> WriteAlignedFeatureIds(const v1::JobSpec& spec,
                                                          const std::string& dir,
                                                          const DataRoots* roots) {
  const auto& f = spec.clustering().features();
  MLCD_ASSIGN_OR_RETURN(DatasetIndex index, LoadChecked(spec.dataset(), spec.dataset().index(),
                                                        "spec.dataset.index", roots));
  std::vector<std::string> paths(f.paths().begin(), f.paths().end());
  StatusOr<std::vector<NpyShardRows>> listed = ListNpyShardRows(paths, roots);
  if (!listed.ok()) return listed.status().WithContext("spec.clustering.features.paths");
  const std::vector<NpyShardRows>& shards = *listed;
  int64_t rows = 0;
  for (const auto& s : shards) rows += s.rows;
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> sample_of_row,
                        AlignFeatureKeys(index, f.keys(), rows, roots));
  return WriteFeatureIds(sample_of_row, shards, dir);
}

}  // namespace mlcd::coordinator
