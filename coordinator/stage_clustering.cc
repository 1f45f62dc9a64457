#include "coordinator/stage_clustering.h"

#include <numeric>

#include "common/adjusted_mutual_info.h"

namespace mlcd::coordinator {
namespace {

// The top-1 label of every id in [0, samples) (-1 where the set has no row).
StatusOr<std::vector<int64_t>> TopOneLabels(const labelstore::LabelStoreClient& client,
                                            const std::string& name, uint64_t samples) {
  std::vector<uint64_t> ids(samples);
  std::iota(ids.begin(), ids.end(), uint64_t{0});
  labelstore::LabelBatch batch;
  MLCD_RETURN_IF_ERROR(client.GetLabels(name, ids.data(), ids.size(), false, &batch)
                           .WithContext("reading the top-1 labels of " + name));
  std::vector<int64_t> top(samples, -1);
  for (size_t i = 0; i < batch.num_rows() && i < top.size(); ++i) top[i] = batch.row(i)[0];
  return top;
}

}  // namespace

StatusOr<StageClustering> SummariseStageClustering(const labelstore::LabelStoreClient& client,
                                                   const StageClusteringQuery& query) {
  MLCD_ASSIGN_OR_RETURN(const std::vector<int64_t> labels,
                        TopOneLabels(client, query.label_set, query.samples));
  StageClustering out;
  out.sizes.assign(static_cast<size_t>(query.k), 0);
  uint64_t labelled = 0;
  for (int64_t y : labels) {
    if (y < 0) continue;
    if (y >= query.k) {
      return Status::DataLoss(query.label_set + " holds cluster " + std::to_string(y) +
                              ", outside the stage's " + std::to_string(query.k) + " clusters");
    }
    ++out.sizes[static_cast<size_t>(y)];
    ++labelled;
  }
  if (labelled == 0) return Status::DataLoss(query.label_set + " labels none of its samples");
  if (query.previous_label_set.empty()) return out;
  MLCD_ASSIGN_OR_RETURN(const std::vector<int64_t> previous,
                        TopOneLabels(client, query.previous_label_set, query.samples));
  // Only the samples both stages labelled are compared.
  std::vector<int64_t> u, v;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || previous[i] < 0) continue;
    u.push_back(previous[i]);
    v.push_back(labels[i]);
  }
  MLCD_ASSIGN_OR_RETURN(out.adjusted_mutual_info, AdjustedMutualInfo(u, v));
  return out;
}

}  // namespace mlcd::coordinator
