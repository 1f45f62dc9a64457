// The value checks of a job specification (mlcd.v1.JobSpec after ApplyJobSpecDefaults, and
// its metadata): every value in range, every name one of its spellings (common/enums.h for the
// enumerations), and the relations between fields (l <= k, k and batch_size <= the number of
// training images, batch_size divisible by world_size, width divisible by heads, ...).
// Problems are returned all at once, never the first only; each names its field path and says
// what is wrong and, where it helps, what would be right. Touches no files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/spec_problem.h"
#include "common/status.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd {

// metadata.name: at most this many characters of [A-Za-z0-9._-].
constexpr size_t kMaxJobNameLength = 100;
// metadata.labels: keys of 1 to this many characters.
constexpr size_t kMaxJobLabelKeyLength = 100;
// metadata.labels: values of at most this many characters.
constexpr size_t kMaxJobLabelValueLength = 1000;
// loss.scale: the largest logit scale s.
constexpr double kMaxLossScale = 128;
// training.world_size: the most ranks of one gang.
constexpr int32_t kMaxWorldSize = 1024;
// training.rounds: the most cluster-and-train rounds of one job.
constexpr int32_t kMaxRounds = 100;
// mcl.stages: the most stages of one multistage contrastive job.
constexpr int32_t kMaxMclStages = 16;
// clustering.l is limited by kMaxLabelsPerSample (common/limits.h).

// The problems of a defaulted spec; paths start with `path_prefix` ("spec" for submitted
// specs, "" for none).
std::vector<SpecProblem> JobSpecProblems(const v1::JobSpec& spec,
                                         const std::string& path_prefix = "spec");
// The problems of a job's metadata (name, labels).
std::vector<SpecProblem> JobMetadataProblems(const v1::JobMetadata& metadata,
                                             const std::string& path_prefix = "metadata");

// The paper's Eq. 4 for an MCL job (spec.mcl present): K^N <= M / b, with K = clustering.k,
// N = mcl.stages, M = `samples` (the training split) and b = training.batch_size, so that
// the K^N pseudo-labels of the last stage can each fill a global batch on average. The
// problem names the numbers; none when it holds, the spec is no MCL job or `samples` is 0.
std::vector<SpecProblem> MclClusterBudgetProblems(const v1::JobSpec& spec, uint64_t samples,
                                                  const std::string& path_prefix = "spec");

// INVALID_ARGUMENT listing every problem ("invalid job spec (N problems):\n  path: what");
// OK when `problems` is empty.
Status SpecProblemsToStatus(const std::vector<SpecProblem>& problems);

}  // namespace mlcd
