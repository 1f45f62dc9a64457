// The job specification (mlcd.v1.JobSpec, proto/mlcd/v1/job.proto) as a whole: YAML job
// specs read and written, and the whole path of a submitted spec (parse, defaults, checks).
// It builds on three pieces, each in its own file (the first two are included here, so this
// header is all a caller of the job spec needs):
//   common/spec_defaults.h    defaults and model presets (ApplyJobSpecDefaults)
//   common/spec_validation.h  the value checks (JobSpecProblems, JobMetadataProblems)
//   common/yaml_proto.h       the general YAML <-> protobuf codec the specs are read with
//
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
#pragma once

#include <string>
#include <vector>

#include "common/spec_defaults.h"
#include "common/spec_problem.h"
#include "common/spec_validation.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd {

// A spec with its metadata, as submitted.
struct ParsedJob {
  v1::JobMetadata metadata;
  v1::JobSpec spec;
};

// Reads the YAML text into metadata + spec without applying defaults or checking values:
// YAML syntax errors, apiVersion other than mlcd/v1, kind other than TrainingJob, unknown
// fields (with a suggestion), values of the wrong type or out of the field's integer range.
// Appends every problem to `problems`; the returned job holds whatever parsed.
ParsedJob ParseJobSpecYamlLenient(const std::string& text, std::vector<SpecProblem>* problems);

// ParseJobSpecYamlLenient, as an error when any problem was found. No defaults applied.
StatusOr<ParsedJob> ParseJobSpecYaml(const std::string& text);

// ApplyJobSpecDefaults + JobSpecProblems as a Status.
Status ValidateJobSpec(v1::JobSpec* spec);

// The whole path of a submitted spec: parse, apply defaults, validate metadata and spec;
// every problem of every stage in one INVALID_ARGUMENT. The returned spec has its defaults
// applied.
StatusOr<ParsedJob> LoadJobSpecYaml(const std::string& text);

// The job as YAML text in the submitted form (non-default fields only when the spec has not
// been defaulted). Round-trips through ParseJobSpecYaml.
std::string JobSpecToYaml(const ParsedJob& job);

}  // namespace mlcd
