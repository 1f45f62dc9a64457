// The job specification (mlcd.v1.JobSpec, proto/mlcd/v1/job.proto): defaults and model
// presets, shared by the coordinator (which parses and validates specs) and the workers
// (which train from them). Zero values in a spec mean "default"; ApplyJobSpecDefaults()
// replaces them with the documented defaults so every process sees the same numbers.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd {

// A ViT size (paper Table 8 for the B/L presets).
struct ModelPreset {
  const char* name;
  int width;
  int depth;
  int heads;
  int patch_size;  // 0 = keep the spec's / dataset's choice
  int image_size;  // 0 = the dataset's
};

// "vit-tiny", "vit-small", "vit-b32", "vit-b16", "vit-l14".
const std::vector<ModelPreset>& ModelPresets();
// NOT_FOUND-style INVALID_ARGUMENT listing the known presets when `name` is unknown.
StatusOr<ModelPreset> FindModelPreset(const std::string& name);

// Fills every zero/unset field with its default, including model fields from the preset
// (explicit fields win over the preset). Idempotent. Does not validate.
void ApplyJobSpecDefaults(v1::JobSpec* spec);

}  // namespace mlcd
