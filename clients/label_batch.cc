#include "clients/label_batch.h"

namespace mlcd::labelstore {

void LabelBatch::Clear() {
  labels_per_sample = 0;
  labels.clear();
  scores.clear();
  sample_ids.clear();
  missing_indices.clear();
  missing_ids.clear();
}

}  // namespace mlcd::labelstore
