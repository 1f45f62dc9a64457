// The job specification (mlcd.v1.JobSpec, proto/mlcd/v1/job.proto): defaults and model
// presets, shared by the coordinator (which parses and validates specs) and the workers
// (which train from them). Zero values in a spec mean "default"; ApplyJobSpecDefaults()
// replaces them with the documented defaults so every process sees the same numbers.
#pragma once

#include <cstdint>
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

// The spellings of EvaluationSpec.features ("embedding", "pooled", "blocks", "tokens";
// worker/vit.h's VitFeatures): one list for the spec validator and the --features flags.
const std::vector<std::string>& EvaluationFeatureKinds();

// ModelSpec.stem "conv" (worker/vit.h, VitStem::kConv): the number of 3x3 stride-2
// convolutions (padding 1) that take an image of `image_size` to image_size / patch_size
// tokens per side, ceil(log2(patch_size)); -1 when that many leave a different side
// (each halves the side rounding up, so ceil(image_size / 2^n) must be image_size /
// patch_size: e.g. 28/7 -> 3 layers, 224/16 -> 4, but 224/14 has none).
int ConvStemLayers(int image_size, int patch_size);

// Fills every zero/unset field with its default, including model fields from the preset
// (explicit fields win over the preset). Idempotent. Does not validate.
void ApplyJobSpecDefaults(v1::JobSpec* spec);

// ---------------------------------------------------------------------------------------
// YAML job specs (`mlcdctl submit job.yaml`, `mlcd-worker train --spec job.yaml`):
//
//   apiVersion: mlcd/v1
//   kind: TrainingJob
//   metadata:
//     name: fashion-mnist-tiny          # [A-Za-z0-9._-]{1,100}
//     labels: {team: vision}
//   spec:                                # mlcd.v1.JobSpec, snake_case field names
//     clustering: {k: 32, l: 4}
//     training: {world_size: 2, batch_size: 64}
//
// Problems are reported all at once, one per line, each with its field path and the line of
// the YAML text, e.g.
//   spec.clustering.l: 12 > k: 10
//   spec.training.batch_sze (line 9): unknown field; did you mean batch_size?

// A spec with its metadata, as submitted.
struct ParsedJob {
  v1::JobMetadata metadata;
  v1::JobSpec spec;
};

// One problem found in a spec: where (a field path such as "spec.clustering.l") and what.
struct SpecProblem {
  std::string path;
  std::string message;
  std::string ToString() const { return path.empty() ? message : path + ": " + message; }
};

// INVALID_ARGUMENT listing every problem ("invalid job spec (N problems):\n  path: what");
// OK when `problems` is empty.
Status SpecProblemsToStatus(const std::vector<SpecProblem>& problems);

// Reads the YAML text into metadata + spec without applying defaults or checking values:
// YAML syntax errors, apiVersion other than mlcd/v1, kind other than TrainingJob, unknown
// fields (with a suggestion), values of the wrong type or out of the field's integer range.
// Appends every problem to `problems`; the returned job holds whatever parsed.
ParsedJob ParseJobSpecYamlLenient(const std::string& text, std::vector<SpecProblem>* problems);

// ParseJobSpecYamlLenient, as an error when any problem was found. No defaults applied.
StatusOr<ParsedJob> ParseJobSpecYaml(const std::string& text);

// Checks a spec after ApplyJobSpecDefaults(): every value in range, names known, and the
// relations between fields (l <= k, k and batch_size <= the number of training images,
// batch_size divisible by world_size, width divisible by heads, ...). Paths start with
// `path_prefix` ("spec" for submitted specs). Touches no files.
std::vector<SpecProblem> JobSpecProblems(const v1::JobSpec& spec,
                                         const std::string& path_prefix = "spec");
std::vector<SpecProblem> JobMetadataProblems(const v1::JobMetadata& metadata,
                                             const std::string& path_prefix = "metadata");

// ApplyJobSpecDefaults + JobSpecProblems as a Status.
Status ValidateJobSpec(v1::JobSpec* spec);

// The whole path of a submitted spec: parse, apply defaults, validate metadata and spec;
// every problem of every stage in one INVALID_ARGUMENT. The returned spec has its defaults
// applied.
StatusOr<ParsedJob> LoadJobSpecYaml(const std::string& text);

// Number of training images the spec's dataset provides (its limit, or the split's size for
// known formats); 0 when unknown without reading files.
uint64_t DatasetTrainingImages(const v1::DatasetSpec& dataset);

// The job as YAML text in the submitted form (non-default fields only when the spec has not
// been defaulted). Round-trips through ParseJobSpecYaml.
std::string JobSpecToYaml(const ParsedJob& job);

}  // namespace mlcd
