// Precomputed features aligned with a dataset index through a keys file (docs/data.md,
// "Features and keys"). clip-retrieval dumps embeddings as .npy shards whose rows follow its
// own order, with each row's image path or sample key in metadata; users write those keys
// to a text file, one per feature row (rows of all shards in the order listed). The
// alignment maps feature row r to the sample id of the index whose key is line r.
// Without a keys file, row i is sample i and only the counts must agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/dataset/dataset_index.h"
#include "common/status.h"

namespace mlcd {

// The .npy shards of `paths` in order (a directory: its *.npy files sorted by name, except
// *.ids.npy and *.labels.npy, as clusterd lists them) with their row counts. NOT_FOUND /
// INVALID_ARGUMENT naming the file when one is missing or not an .npy.
struct NpyShardRows {
  std::string path;
  int64_t rows = 0;
  int64_t cols = 0;  // the feature dimension d
};
// With `roots`, a symbolic link in a listed directory must resolve under them
// (PERMISSION_DENIED otherwise; common/data_roots.h), and every shard is opened confined to
// them (MappedNpy::Open; without `roots`, the process's, common/confined_file.h).
StatusOr<std::vector<NpyShardRows>> ListNpyShardRows(const std::vector<std::string>& paths,
                                                     const DataRoots* roots = nullptr);

// Sample id of every feature row. Every line of `keys_path` must be a key of `index`, no key
// may appear twice, and the file must have exactly one line per feature row and one per
// sample (a permutation of the index). Otherwise INVALID_ARGUMENT naming the keys file, the
// line (row) and both counts (e.g. "keys.txt row 17: key 'x' is not in the dataset index
// (1000 keys for 1000 feature rows and 1000 samples)"). The keys file is read confined to
// `roots` (else the process's).
StatusOr<std::vector<int64_t>> AlignFeatureKeys(const DatasetIndex& index,
                                                const std::string& keys_path, int64_t feature_rows,
                                                const DataRoots* roots = nullptr);

// Checks features without a keys file: their rows must number the index's samples.
// INVALID_ARGUMENT naming both counts and the first shard otherwise.
Status CheckFeatureRows(const DatasetIndex& index, const std::vector<NpyShardRows>& shards);

// Writes one `<dir>/<i>.ids.npy` (int64, the sample ids of shard i's rows) per shard, the
// files clusterd's FeatureSource.ids_paths takes, and returns their paths.
StatusOr<std::vector<std::string>> WriteFeatureIds(const std::vector<int64_t>& sample_of_row,
                                                   const std::vector<NpyShardRows>& shards,
                                                   const std::string& dir);

}  // namespace mlcd
