// The coordinator's checks of what callers send, before anything changes, and the job a
// checked submission becomes: the files a job
// spec names, whether the registered workers can run the job, and the fields of the worker
// RPCs. Each returns INVALID_ARGUMENT / FAILED_PRECONDITION naming the field and what to
// change. Pure functions: no state, no locks (CheckWorkerSupport reads the registry and so
// runs with the JobManager's mutex held).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "coordinator/job_entry.h"
#include "coordinator/worker_registry.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// The job a SubmitJobRequest describes (YAML text, or messages with the defaults applied),
// validated: request id, spec and metadata rules (common/job_spec.h), InputProblems and the
// image datasets (coordinator/dataset_checks.h; with a data_dir, an image dataset given by
// path gets its index built there: ResolveDatasetIndexes).
// With `roots`, every path the spec names must resolve under them first
// (ConfinedPathProblems), before anything looks at the files.
StatusOr<ParsedJob> ParseSubmission(const v1::SubmitJobRequest& request,
                                    const std::string& data_dir = "",
                                    const DataRoots* roots = nullptr);

// The spec's paths (datasets, indexes, features, keys, checkpoint_dir) that do not resolve
// under `roots`: one problem each, the same whether the path exists or not.
std::vector<SpecProblem> ConfinedPathProblems(const v1::JobSpec& spec, const DataRoots& roots);

// A ListJobsRequest, checked: page size (0 = 100, at most 1000), states, and the page token
// (the seq below which to list; INT64_MAX for the first page).
struct ListJobsQuery {
  int page_size = 100;
  std::set<int> states;
  int64_t before_seq = INT64_MAX;
};
StatusOr<ListJobsQuery> ParseListJobs(const v1::ListJobsRequest& request);

// Problems with the files a spec names, checked on the coordinator's host (which shares the
// dataset and feature storage with clusterd and the workers).
std::vector<SpecProblem> InputProblems(const v1::JobSpec& spec);

// FAILED_PRECONDITION when workers are registered and none of them can run a phase the spec
// needs (extract for rounds > 1 or model features, cluster and assign labels for
// clustering.engine gang, neither with a given clustering.label_set; evaluate when evaluation
// is enabled). With no worker registered
// the job is accepted and waits for workers.
Status CheckWorkerSupport(const v1::JobSpec& spec, const WorkerRegistry& workers,
                          Clock::time_point now);

// SubmitJobRequest.request_id: at most 200 printable characters.
Status CheckRequestId(const std::string& request_id);
// RegisterWorkerRequest: name, host (at most kMaxHostLength printable bytes), rendezvous
// port, kinds.
Status CheckRegistration(const v1::RegisterWorkerRequest& request);
// CancelJobRequest: an id, a reason of at most kMaxCancelReasonLength bytes.
Status CheckCancel(const v1::CancelJobRequest& request);
// GetAssignmentRequest: wait_seconds in [0, max_poll_seconds], rendezvous port.
Status CheckPoll(const v1::GetAssignmentRequest& request, int max_poll_seconds);

// The id a job named `name` gets as the seq-th submission: the name's allowed characters
// (at most 60; "job" when none) + "-" + seq.
std::string JobIdFor(const std::string& name, int64_t seq);

// The job a checked submission creates (PENDING, "submitted", not yet stored); its id is
// JobIdFor(metadata.name, seq), empty for a dry run.
std::unique_ptr<JobEntry> NewJobEntry(const v1::SubmitJobRequest& request, const ParsedJob& parsed,
                                      int64_t seq);

}  // namespace mlcd::coordinator
