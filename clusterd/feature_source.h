// Feature rows for clustering: .npy shards (float16 or float32, C order, n x d) memory-mapped
// and read in chunks, so that no more than one chunk of rows is ever converted in memory.
//
//   MLCD_ASSIGN_OR_RETURN(FeatureShards shards, FeatureShards::Open({"feats/"}, {}));
//   MLCD_RETURN_IF_ERROR(shards.CheckFinite());
//   std::vector<float> chunk(rows * shards.d());
//   shards.ReadRows(begin, begin + rows, chunk.data());   // float32, L2-normalised
//
// Rows are numbered globally across shards in order (shard 0 first). The sample id of a row is
// that global index, unless ids files are given (one per shard, .npy int64/uint64 of the
// shard's length), in which case it is the id stored for the row.
//
// Every problem a user can cause is an error naming the file and what to do about it:
// missing files (NOT_FOUND), not an .npy / unsupported dtype / Fortran order / shards of
// different d / ids of the wrong length or duplicated / empty input (INVALID_ARGUMENT),
// truncated files (DATA_LOSS), NaN or Inf values (INVALID_ARGUMENT with the count and the
// first rows, from CheckFinite()).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/limits.h"
#include "common/npy.h"
#include "common/status.h"

namespace mlcd::clusterd {

// Expands `paths` (files or directories) into the list of shard files, in order. A directory
// contributes its *.npy files sorted by name, except *.ids.npy and *.labels.npy (sample ids
// and class labels kept beside the shards). INVALID_ARGUMENT when nothing is found. With
// `roots`, a symbolic link in a listed directory must resolve under them
// (DataRoots::CheckListedEntry: PERMISSION_DENIED, the same for a dangling link).
StatusOr<std::vector<std::string>> ExpandShardPaths(const std::vector<std::string>& paths,
                                                    const DataRoots* roots = nullptr);

// Largest feature dimension d a shard may have (d is kept as an int).
constexpr int64_t kMaxFeatureDim = int64_t{1} << 24;

class FeatureShards {
 public:
  // Opens and validates every shard (header, dtype, shape, size, same d) and the optional ids
  // files. Does not read the data; see CheckFinite() for the value scan.
  // `roots` as for ExpandShardPaths; every file is opened confined to them (MappedNpy::Open:
  // a file reached through a link swapped in after the request was checked is refused).
  static StatusOr<FeatureShards> Open(const std::vector<std::string>& paths,
                                      const std::vector<std::string>& ids_paths = {},
                                      const DataRoots* roots = nullptr);

  FeatureShards(FeatureShards&&) = default;
  FeatureShards& operator=(FeatureShards&&) = default;

  // Total rows over all shards (> 0) and their dimension.
  int64_t rows() const { return total_rows_; }
  int d() const { return d_; }
  size_t num_shards() const { return shards_.size(); }
  const std::string& shard_path(size_t i) const { return shards_[i].path(); }
  int64_t shard_rows(size_t i) const { return shards_[i].rows(); }
  NpyDtype shard_dtype(size_t i) const { return shards_[i].dtype(); }
  bool has_ids() const { return !ids_.empty(); }
  // Human description: "3 shards, 500000 x 128 float32".
  std::string Describe() const;

  // Scans every value: INVALID_ARGUMENT naming each bad file with how many rows hold NaN or
  // Inf and the first few of them (row within the file). `should_stop` (may be empty) is
  // polled between blocks; CANCELLED when it returns true.
  Status CheckFinite(const std::function<bool()>& should_stop = nullptr) const;

  // Converts global rows [begin, end) to float32 into `out` ((end - begin) x d). With
  // `normalize`, every row is scaled to unit L2 norm (rows of norm 0 stay 0).
  void ReadRows(int64_t begin, int64_t end, float* out, bool normalize = true) const;
  // Same for an ascending list of global rows (a training sample).
  void GatherRows(const std::vector<int64_t>& rows, float* out, bool normalize = true) const;

  // Sample id of global row `row`.
  uint64_t sample_id(int64_t row) const;
  // Sample ids of rows [begin, end) into `out`.
  void SampleIds(int64_t begin, int64_t end, uint64_t* out) const;

  // Tells the kernel rows [begin, end) will not be read again soon (page-cache pressure).
  void DropRows(int64_t begin, int64_t end) const;

 private:
  FeatureShards() = default;
  // Shard holding global row `row` and the row's index inside it.
  size_t ShardOf(int64_t row, int64_t* local) const;

  std::vector<MappedNpy> shards_;
  std::vector<int64_t> starts_;  // global index of each shard's first row, plus total at end
  std::vector<MappedNpy> ids_;   // empty or one per shard
  int64_t total_rows_ = 0;
  int d_ = 0;
};

// L2-normalises `n` rows of `d` floats in place (rows of norm 0 stay 0).
void NormalizeRows(float* x, int64_t n, int d);

// kMaxClassId (common/limits.h) bounds a class-labels file's ids.

// Reads a class-labels file (.npy of any integer dtype, one value per row, values in
// [0, kMaxClassId)) for `expected_rows` rows. INVALID_ARGUMENT naming the file (and the row)
// on a length mismatch, a negative or a too large value.
StatusOr<std::vector<int64_t>> ReadClassLabels(const std::string& path, int64_t expected_rows);

}  // namespace mlcd::clusterd
