// LabelBatch: rows of a label set in memory, the one type for them on both sides of the label
// store: what LabelStoreClient::GetLabels reads (clients/labelstore_client.h) and what
// clusterd's top-l assignment produces and writes (clusterd/assign.h). No gRPC here.
//
// Row i holds l = labels_per_sample cluster ids, best first, and, when the batch carries
// scores, l scores beside them. Reuse one batch across calls: its vectors keep their capacity,
// so a steady-state read allocates nothing here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlcd::labelstore {

struct LabelBatch {
  int32_t labels_per_sample = 0;
  // n * l cluster ids, row-major; rows of missing ids (GetLabels) are all -1.
  std::vector<int32_t> labels;
  // n * l scores when asked for (NaN rows for missing ids), else empty.
  std::vector<float> scores;
  // The sample id of each row when the batch is to be written (clusterd's assignment fills
  // them); GetLabels leaves them empty (the caller has the ids it asked for).
  std::vector<uint64_t> sample_ids;
  // GetLabels: positions in the request, ascending, of ids without a row, and those ids.
  std::vector<uint32_t> missing_indices;
  std::vector<uint64_t> missing_ids;

  size_t num_rows() const { return labels_per_sample > 0 ? labels.size() / labels_per_sample : 0; }
  const int32_t* row(size_t i) const { return labels.data() + i * labels_per_sample; }
  void Clear();
};

}  // namespace mlcd::labelstore
