// The bad samples of a round on the job record (RoundStatus.bad_samples; docs/data.md, "Bad
// images"), from the training ranks' heartbeats and reports (WorkerProgress.bad_samples,
// bad_sample_keys: a rank's distinct unreadable images so far and the first keys).
//
// Each member of the training gang keeps its latest figures (GangMember); the round's count
// is the most any gang attempt met, summed over its ranks (a restarted gang meets the same
// images again, so attempts are not added up); its first_keys the first kMaxBadSampleKeys
// distinct keys in the order reported, each cut to kMaxBadSampleKeyBytes.
// Runs with the JobManager's mutex held.
#pragma once

#include <string>

#include "coordinator/job_entry.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// No-op unless the job's attempt is a TRAIN gang with member `assignment_id` and `progress`
// reports bad samples.
void RecordBadSamples(JobEntry* job, const std::string& assignment_id,
                      const v1::WorkerProgress& progress);

}  // namespace mlcd::coordinator
