// Where a job's checkpoints go (docs/hardening.md, "Checkpoints"; docs/security.md):
//   - its own folder <data-dir>/jobs/<id>/ckpt when spec.training.checkpoint_dir is empty;
//   - else spec.training.checkpoint_dir, which must lie inside the submitter's output area
//     <data-dir>/users/<kind>/<name>/ (common/output_area_names.h; the area clusterd writes the
//     same identity's outputs into), so no submitter names another user's or job's folder;
//   - one root holds one job's checkpoints: a checkpoint_dir that another job of this
//     coordinator uses (the same folder, one inside it or one holding it), or that holds
//     another job's owner marker (common/checkpoint_owner.h) itself or in a folder above it
//     inside the area, is refused at submit; the worker refuses a root another job claimed;
//   - a checkpoint rank 0 reports is committed only when it lies inside the job's root
//     (CheckpointLiesIn), the root its TRAIN assignments were given.
// Pure functions over their arguments; CheckpointDirOwner reads markers (no lock needed),
// CheckCheckpointDirUnshared reads the job table (called with the JobManager's mutex held).
#pragma once

#include <string>

#include "common/data_roots.h"
#include "common/status.h"
#include "coordinator/job_table.h"
#include "mlcd/v1/job.pb.h"

namespace mlcd::coordinator {

// The checkpoint root of job `job_id` with `spec`: what its TRAIN assignments get, and where
// every checkpoint it commits lies.
std::string JobCheckpointDir(const std::string& data_dir, const std::string& job_id,
                             const v1::JobSpec& spec);

// spec.training.checkpoint_dir of a job `submitter` submits (checked against `roots` first,
// ConfinedPathProblems): INVALID_ARGUMENT naming the field, the path and the folder to use when
// it is set and lies outside the submitter's area of `data_dir`; else the job that claimed it
// (the owner marker of the folder or of one above it inside the area), "" for none.
StatusOr<std::string> CheckpointDirOwner(const v1::JobSpec& spec, const std::string& submitter,
                                         const std::string& data_dir, const DataRoots& roots);

// FAILED_PRECONDITION when `owner` (CheckpointDirOwner) names a job, or a job of `jobs` has a
// checkpoint root that is spec.training.checkpoint_dir, lies inside it or holds it. OK for an
// empty checkpoint_dir (the job's own folder).
Status CheckCheckpointDirUnshared(const v1::JobSpec& spec, const std::string& owner,
                                  const std::string& data_dir, const JobTable& jobs);

// MCL: the folder of stage j's checkpoints under the job's root, "<root>/stage<j>" (each
// stage prunes only its own, so every stage's encoder stays; docs/mcl.md).
std::string StageCheckpointDir(const std::string& root, int j);

// True when `reported` lies strictly inside `dir`, both lexically normalised; a path with a
// ".." component never does.
bool CheckpointLiesIn(const std::string& reported, const std::string& dir);

}  // namespace mlcd::coordinator
