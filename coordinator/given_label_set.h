// A job that trains on a given label set (clustering.label_set) instead of clustering: the
// coordinator's submit-time checks of the set, in the label store, against the spec.
//
// The set is the job's labels for its one round: round 0 goes from PENDING straight to
// TRAINING with it (job_manager.cc), and the TRAIN gang's assignments name it. The
// coordinator never writes, seals or deletes it: it is not one of the job's own sets
// (job/<id>/r<r>), which are the only ones it changes.
//
// Labels inside [0, k) need no check here: the label store refuses any WriteLabels row with
// a label outside the set's class count (docs/labelstore.md), so every row of a set is in
// range. Who may train on a set is caller_checks.h's CheckGivenLabelSetOwner.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "mlcd/v1/job.pb.h"
#include "mlcd/v1/labelstore.pb.h"

namespace mlcd::coordinator {

// The training split's sample ids as the workers will read them, 0..N-1: N is the dataset
// index's size for image-folder and webdataset datasets (dataset.index, set at submit), the
// images of the Fashion-MNIST train split (at most dataset.limit) otherwise. Errors of
// reading them as "spec.dataset...: ...".
StatusOr<uint64_t> TrainingSampleCount(const v1::JobSpec& spec);

// The set `name` as the label store at `labelstore_address` describes it. INVALID_ARGUMENT
// for a name the store does not take, NOT_FOUND for a set that does not exist, each naming
// spec.clustering.label_set and the fix; other errors (the store unreachable) with context.
StatusOr<v1::LabelSetInfo> DescribeGivenLabelSet(const std::string& labelstore_address,
                                                 const std::string& name);

// Checks the set against the spec and fills what the spec leaves to it: clustering.k and l
// 0 become the set's class count and labels per sample. FAILED_PRECONDITION for a set that
// is not sealed, or whose rows do not cover the `samples` sample ids of the training split
// (both numbers named); INVALID_ARGUMENT for a k or l the spec gives that differs from the
// set's (both numbers named), or for a spec whose relations fail with the set's k and l
// (world_size <= k, ...: common/spec_validation.h).
Status ApplyGivenLabelSet(const v1::LabelSetInfo& info, uint64_t samples, v1::JobSpec* spec);

}  // namespace mlcd::coordinator
