// Annotations in, as the rows of a label set (`mlcdctl labels import`): per-sample label lists
// read by sample key (JSON lines matched through a dataset index) or by sample id (an .npy),
// checked in full before anything is written.
//
//   JSON lines   {"key": "shard-00003/000123", "labels": [4, 17]}   one sample a line; the key
//                is the dataset index's (keys.txt), so sample id = its row in the index
//   .npy         int32/int64 [n] or [n, c]: row i is sample i's labels, < 0 = padding
//
// A label set has a fixed l labels per row and no padding value, so a sample with fewer than l
// labels is padded by repeating its first label: the losses count a label once per sample
// (docs/loss.md), so the padding adds nothing. l is the most labels any sample has.
//
// Every problem is counted, and the first kMaxNamedProblems of each kind are named: a key
// the index does not have, a key or id given twice, a label outside [0, k), a sample with no
// label, a line that is not {"key": string, "labels": [integers]}. Any problem refuses the
// whole import (INVALID_ARGUMENT with the counts): nothing partial is ever written.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::cli {

// How many examples of one kind of problem a refusal names.
inline constexpr int kMaxNamedProblems = 3;
// The most labels one imported sample may have (the label store's l limit is checked too).
inline constexpr int64_t kMaxImportedLabelsPerSample = 64;

// Rows ready for WriteLabels: ids[i]'s labels are labels[i*l, (i+1)*l), each in [0, k).
struct ImportedLabels {
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  int32_t l = 0;
  // What the rows hold, for the report.
  int64_t min_labels = 0, max_labels = 0;
  double mean_labels = 0;
};

// JSON lines at `path` against the index's keys (keys[i] = sample i's key).
StatusOr<ImportedLabels> ImportJsonLines(const std::string& path,
                                         const std::vector<std::string>& keys, int64_t k);

// An .npy of labels by sample id at `path`.
StatusOr<ImportedLabels> ImportNpy(const std::string& path, int64_t k);

// Where an import's labels come from (`mlcdctl labels import`'s flags): by key, jsonl_path
// with index_dir (the dataset index, LoadDatasetIndex); or by id, npy_path.
struct ImportSource {
  int64_t k = 0;
  std::string jsonl_path, index_dir, npy_path;
};

// The rows of `source`, every line or row checked (nothing is sent before all is good).
// INVALID_ARGUMENT for k outside [1, 2^31-1], both or neither of jsonl/npy, --index with
// --npy or missing with --jsonl, and the import's own refusals.
StatusOr<ImportedLabels> ReadImportSource(const ImportSource& source);

// --meta key=value entries into `metadata`; INVALID_ARGUMENT naming a malformed one.
Status ParseMetaEntries(const std::vector<std::string>& entries,
                        std::map<std::string, std::string>* metadata);

}  // namespace mlcd::cli
