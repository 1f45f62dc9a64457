// The coordinator's submit-time checks of image datasets and the features aligned with
// them (docs/data.md), on the coordinator's host, which shares the dataset storage with
// clusterd and the workers:
// - the dataset index (dataset.index, and evaluation's index and test_index) loads and its
//   fingerprint matches the files: a missing, unreadable or changed shard or image is
//   FAILED_PRECONDITION naming the file, before anything runs;
// - the index is of the spec's format and, when the spec also names the shards or root,
//   of those files (INVALID_ARGUMENT otherwise);
// - k and the batch size fit the index's sample count;
// - npy features line up with the samples: by keys (clustering.features.keys) or row for
//   row; a count mismatch, an unknown or duplicate key is INVALID_ARGUMENT naming the file,
//   the row and both counts.
// Fashion-MNIST datasets pass through (coordinator/input_checks.h checks their files).
#pragma once

#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd::coordinator {

// With `roots` (may be null): links met while listing the dataset's or the features'
// directories, and the files an index names, must resolve under them (common/data_roots.h).
Status CheckDatasetInputs(const v1::JobSpec& spec, const DataRoots* roots = nullptr);

// An image dataset given by path(s) without dataset.index gets one from the coordinator:
// `<data_dir>/datasets/<format>-<hash>`, where the hash covers every file's path, size and
// mtime, so a dataset that changes gets a new index and a running job keeps refusing the
// changed files. An index already there is reused; otherwise it is built (reading every
// shard: for big datasets run `mlcdctl dataset index` beforehand and give dataset.index).
// Sets dataset.index (and evaluation.dataset.index when it names the same files). Errors of
// the build (NOT_FOUND naming a missing shard, DATA_LOSS for a damaged one, ...) as
// "spec.dataset.path: ...". No-op with an empty data_dir or when the index is given.
// `roots` as for CheckDatasetInputs.
Status ResolveDatasetIndexes(const std::string& data_dir, v1::JobSpec* spec,
                             const DataRoots* roots = nullptr);

// At the start of round 0 with clustering.features.keys: the sample id of every feature row
// (the same checks as at submit, the index's fingerprint included), written as one
// `<dir>/<i>.ids.npy` per shard for clusterd (FeatureSource.ids_paths); their paths. With
// `roots` the folders of shards are listed and every file read confined to them again (the
// spec was checked at submit; this listing happens later, rounds after it).
StatusOr<std::vector<std::string>> WriteAlignedFeatureIds(const v1::JobSpec& spec,
                                                          const std::string& dir,
                                                          const DataRoots* roots = nullptr);

}  // namespace mlcd::coordinator
