// The baselines of a job's evaluation (EvaluationSpec.baselines; docs/evaluation.md,
// "Baselines"): the same linear probe and kNN, on the same splits and limits, for
//   * "random-init": a randomly initialised model of the spec's shape, initialised exactly
//     as the trainer starts round 0 (training.seed), through the same features;
//   * "raw-pixels": the model's input images (the evaluation transform: scaling, the
//     dataset's normalisation, resize to model.image_size) flattened and L2-normalised;
//     inputs with more than kMaxPixelFeatureDim values are average-pooled down to fit.
// They run in one process (rank 0 of the evaluation gang, after the model's evaluation).
// Each result is cached as <cache_dir>/<name>-<key>.json, the key a hash of everything that
// decides it (evaluation dataset spec, the size and time of its index files and of its
// path(s) (a folder: its own time and its files'), splits' limits,
// probe and kNN settings, and for random-init the model spec, features and seed), so the
// next job with the same data and settings reads it instead (BaselineResult.cached).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "worker/eval/runner.h"

namespace mlcd::worker {

// Raw-pixel features wider than this are average-pooled (per channel, square grid) to fit.
constexpr int64_t kMaxPixelFeatureDim = 3072;

// `job` is the job's evaluation (its spec, or its checkpoint's when has_spec is false; the
// limits and settings as given). `cache_dir` empty = no cache. Errors of either baseline are
// returned (the caller decides whether they fail the job's evaluation).
StatusOr<std::vector<v1::BaselineResult>> RunBaselines(const EvaluationOptions& job,
                                                       const std::string& cache_dir);

// The cache key of one baseline (hex), exposed for tests: equal for equal inputs, different
// when anything that decides the result differs.
StatusOr<std::string> BaselineCacheKey(const EvaluationOptions& job, const std::string& name);

}  // namespace mlcd::worker
