// The job specification's defaults and model presets (mlcd.v1.JobSpec,
// proto/mlcd/v1/job.proto), shared by the coordinator (which parses and validates specs) and
// the workers (which train from them). Zero values in a spec mean "default";
// ApplyJobSpecDefaults() replaces them with the documented defaults so every process sees the
// same numbers. The spec as a whole (YAML reading, validation): common/job_spec.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd {

// A ViT size (paper Table 8 for the B/L presets) and block layout.
struct ModelPreset {
  const char* name;
  int width;
  int depth;
  int heads;
  int patch_size;      // 0 = keep the spec's / dataset's choice
  int image_size;      // 0 = the dataset's
  const char* layout;  // ModelSpec.layout: "vit" or "clip"
};

// "vit-tiny", "vit-small", "vit-b32", "vit-b16", "vit-l14", and their CLIP-layout twins
// "clip-tiny", "clip-small", "clip-b32", "clip-b16", "clip-l14", plus "clip-l14-336" (the
// LLaVA-1.5 tower's size).
const std::vector<ModelPreset>& ModelPresets();
// NOT_FOUND-style INVALID_ARGUMENT listing the known presets when `name` is unknown.
StatusOr<ModelPreset> FindModelPreset(const std::string& name);

// The spellings of EvaluationSpec.features ("embedding", "pooled", "blocks", "tokens";
// worker/model/vit.h's VitFeatures): one list for the spec validator and the --features flags.
const std::vector<std::string>& EvaluationFeatureKinds();

// ModelSpec.stem "conv" (worker/model/vit.h, VitStem::kConv): the number of 3x3 stride-2
// convolutions (padding 1) that take an image of `image_size` to image_size / patch_size
// tokens per side, ceil(log2(patch_size)); -1 when that many leave a different side
// (each halves the side rounding up, so ceil(image_size / 2^n) must be image_size /
// patch_size: e.g. 28/7 -> 3 layers, 224/16 -> 4, but 224/14 has none).
int ConvStemLayers(int image_size, int patch_size);

// clustering.seed when a spec leaves it unset (0): what ApplyJobSpecDefaults() puts there.
inline constexpr uint64_t kDefaultClusteringSeed = 1234;

// The k-means seed of round `round` of a job whose spec went through ApplyJobSpecDefaults():
// clustering.seed + round. Both engines take it from here (the coordinator's Cluster request
// to clusterd, the gang's ranks), so one spec clusters alike on either.
uint64_t ClusteringRoundSeed(const v1::ClusteringSpec& clustering, int round);

// Fills every zero/unset field with its default, including model fields from the preset
// (explicit fields win over the preset). Idempotent. Does not validate.
void ApplyJobSpecDefaults(v1::JobSpec* spec);

// True for the formats read through a dataset index: "image-folder", "webdataset".
bool IsIndexedFormat(const std::string& format);

// Number of training images the spec's dataset provides (its limit, or the split's size for
// known formats); 0 when unknown without reading files.
uint64_t DatasetTrainingImages(const v1::DatasetSpec& dataset);

}  // namespace mlcd
