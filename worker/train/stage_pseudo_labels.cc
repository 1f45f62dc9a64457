#include "worker/train/stage_pseudo_labels.h"

#include <map>
#include <numeric>
#include <utility>

namespace mlcd::worker {

StatusOr<std::vector<int64_t>> CombineStageLabels(const std::vector<std::vector<int64_t>>& stages) {
  if (stages.empty()) return Status::InvalidArgument("no earlier stage to make pseudo-labels of");
  const size_t n = stages[0].size();
  for (size_t j = 1; j < stages.size(); ++j) {
    if (stages[j].size() != n) {
      return Status::InvalidArgument("stage " + std::to_string(j) + " labels " +
                                     std::to_string(stages[j].size()) + " samples, stage 0 " +
                                     std::to_string(n));
    }
  }
  // One stage at a time: the pair (pseudo-label so far, this stage's cluster) is renumbered
  // densely, so the values never overflow however many stages there are.
  std::vector<int64_t> pseudo(n, 0);
  for (const auto& stage : stages) {
    std::map<std::pair<int64_t, int64_t>, int64_t> ids;
    for (size_t i = 0; i < n; ++i) {
      const auto key = std::make_pair(pseudo[i], stage[i]);
      auto it = ids.find(key);
      if (it == ids.end()) it = ids.emplace(key, static_cast<int64_t>(ids.size())).first;
      pseudo[i] = it->second;
    }
  }
  return pseudo;
}

StatusOr<std::vector<int64_t>> ReadStagePseudoLabels(const labelstore::LabelStoreClient& client,
                                                     const std::vector<std::string>& sets,
                                                     int64_t num_samples) {
  if (num_samples < 1) return Status::InvalidArgument("no training samples to label");
  std::vector<int64_t> ids(static_cast<size_t>(num_samples));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  std::vector<std::vector<int64_t>> stages;
  for (const std::string& name : sets) {
    labelstore::LabelBatch batch;
    MLCD_RETURN_IF_ERROR(client.GetLabels(name, ids.data(), ids.size(), false, &batch)
                             .WithContext("reading the stage labels of " + name));
    if (batch.missing_ids.size() == ids.size()) {
      return Status::FailedPrecondition("label set " + name + " labels none of the " +
                                        std::to_string(num_samples) + " training samples");
    }
    std::vector<int64_t> top(ids.size(), -1);
    for (size_t i = 0; i < batch.num_rows() && i < top.size(); ++i) top[i] = batch.row(i)[0];
    stages.push_back(std::move(top));
  }
  return CombineStageLabels(stages);
}

}  // namespace mlcd::worker
