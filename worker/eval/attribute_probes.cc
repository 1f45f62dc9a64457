#include "worker/eval/attribute_probes.h"

namespace mlcd::worker {

StatusOr<std::vector<AttributeProbe>> RunAttributeProbes(
    const FeatureMatrix& train, const FeatureMatrix& test,
    const std::vector<AttributeLabels>& attributes, const LinearProbeOptions& options) {
  std::vector<AttributeProbe> out;
  for (const AttributeLabels& a : attributes) {
    if (a.num_classes < 1)
      return Status::InvalidArgument("attribute " + a.name + " has no classes");
    LinearProbeOptions po = options;
    po.num_classes = a.num_classes;
    StatusOr<LinearProbeResult> probe = RunLinearProbe(train, a.train, test, a.test, po);
    if (!probe.ok()) return probe.status().WithContext("attribute " + a.name);
    out.push_back({a.name, a.num_classes, std::move(*probe)});
  }
  return out;
}

}  // namespace mlcd::worker
