// Per-attribute linear probes (MCL's protocol, Sec. 5.1): when a dataset names independent
// attributes of its images (Trifeature: shape, texture, colour), each attribute is a
// single-label task on the same frozen features, scored by its own linear probe
// (worker/eval/linear_probe.h, the CLIP protocol with its own λ search), side by side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/eval/features.h"
#include "worker/eval/linear_probe.h"

namespace mlcd::worker {

// One attribute's class ids on the train and test rows (each in [0, num_classes)).
struct AttributeLabels {
  std::string name;
  int num_classes = 0;
  std::vector<int64_t> train;
  std::vector<int64_t> test;
};

struct AttributeProbe {
  std::string name;
  int num_classes = 0;
  LinearProbeResult probe;
};

// One probe per attribute, in the given order. INVALID_ARGUMENT (naming the attribute) when
// its rows or class ids do not fit the features.
StatusOr<std::vector<AttributeProbe>> RunAttributeProbes(
    const FeatureMatrix& train, const FeatureMatrix& test,
    const std::vector<AttributeLabels>& attributes, const LinearProbeOptions& options);

}  // namespace mlcd::worker
