// Limits and request validation of the label store (library mlcd_labelstore_client in
// clients/, no RocksDB here), shared by the service (labelstore/) and its client library
// (clients/labelstore_client.h). Namespace mlcd::labelstore, as the service's wire contract.
//
// Every function returns OK or INVALID_ARGUMENT with a message that says what was wrong and
// how to fix it; the service returns these statuses to callers unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/status.h"
#include "mlcd/v1/labelstore.pb.h"

namespace mlcd::labelstore {

// Label set names: [A-Za-z0-9._/-]{1,200}, not starting with '/' and without "//", e.g.
// "job/abc123/r0".
constexpr size_t kMaxNameLength = 200;
// l: labels per sample (common/limits.h).
using ::mlcd::kMaxLabelsPerSample;
// Ids per GetLabels request (the client library splits larger reads).
constexpr size_t kMaxIdsPerRead = 65536;
// Rows per WriteLabels message (the client library splits larger writes).
constexpr size_t kMaxRowsPerWriteMessage = 65536;
// Cap on n * l per message, reads and writes alike (64 MiB of labels, 64 MiB of scores).
constexpr size_t kMaxValuesPerMessage = size_t{1} << 24;
// Metadata entries of a set and the size of each key/value.
constexpr size_t kMaxMetadataEntries = 64;
constexpr size_t kMaxMetadataKeyBytes = 256;
constexpr size_t kMaxMetadataValueBytes = 4096;
// Write capabilities (clients/write_capability.h): the holder's description, and how long a
// capability the coordinator mints for a labelling gang's rank stays valid. The store checks
// it when a WriteLabels stream opens (its first message), so it needs to cover the time from
// the gang's start to a rank's first written rows, not the whole phase; a later gang of the
// round gets new ones.
constexpr size_t kMaxCapabilityHolderLength = 200;
constexpr int64_t kLabelWriteCapabilitySeconds = 6 * 3600;

// Largest number of rows one message may carry for a set with `labels_per_sample` labels.
size_t MaxRowsPerMessage(int32_t labels_per_sample);

Status ValidateLabelSetName(const std::string& name);
Status ValidateCreateRequest(const v1::CreateLabelSetRequest& request);

// Shape of a set as validation needs it.
struct LabelSetShape {
  int32_t num_classes = 0;
  int32_t labels_per_sample = 0;
  bool with_scores = false;
};

// Checks one WriteLabels message against the set's shape: 1..MaxRowsPerMessage rows,
// labels.size() == n * l, every label in [0, k), scores.size() == n * l (with scores) or 0
// (without), finite scores, no sample id twice. `scratch` is reused between calls.
Status ValidateWriteMessage(const v1::WriteLabelsRequest& request, const LabelSetShape& shape,
                            std::vector<uint64_t>* scratch);

// Checks n rows of l labels (and l scores unless `scores` is null) against `shape`: every label
// in [0, k), every score finite. INVALID_ARGUMENT describing the first bad row (sample id, row,
// column, value) and how many of the n rows are bad. Used by ValidateWriteMessage, and by
// clients to check a whole upload before sending any of it (each message commits on its own).
Status ValidateLabelRows(const uint64_t* ids, size_t n, const int32_t* labels, const float* scores,
                         const LabelSetShape& shape);

// INVALID_ARGUMENT when a sample id occurs twice among `ids`; `where` names them in the
// message ("one message", a file name). `scratch` is reused between calls.
Status CheckUniqueIds(const uint64_t* ids, size_t n, const std::string& where,
                      std::vector<uint64_t>* scratch);

// Checks a GetLabels request's size (1..kMaxIdsPerRead ids, n * l <= kMaxValuesPerMessage).
Status ValidateReadSize(size_t num_ids, int32_t labels_per_sample);

}  // namespace mlcd::labelstore
