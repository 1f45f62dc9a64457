#include "coordinator/input_checks.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/idx.h"
#include "common/limits.h"
#include "common/spec_defaults.h"
#include "coordinator/dataset_checks.h"

namespace mlcd::coordinator {
namespace {

bool ValidName(const std::string& name, size_t max_size) {
  if (name.empty() || name.size() > max_size) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  }
  return true;
}

Status CheckRendezvousPort(int port) {
  if (port < 0 || port > 65535) {
    return Status::InvalidArgument("rendezvous_port: " + std::to_string(port) +
                                   " is not in [0, 65535]");
  }
  return Status::Ok();
}

}  // namespace

std::vector<SpecProblem> ConfinedPathProblems(const v1::JobSpec& spec, const DataRoots& roots) {
  std::vector<SpecProblem> problems;
  auto check = [&](const std::string& field, const std::string& path) {
    if (path.empty()) return;
    Status st = roots.Confine(path, field).status();
    if (!st.ok()) problems.push_back({field, st.message().substr(field.size() + 2)});
  };
  auto dataset = [&](const std::string& prefix, const v1::DatasetSpec& d) {
    check(prefix + ".path", d.path());
    for (int i = 0; i < d.paths_size(); ++i)
      check(prefix + ".paths[" + std::to_string(i) + "]", d.paths(i));
    check(prefix + ".index", d.index());
    check(prefix + ".test_index", d.test_index());
  };
  dataset("spec.dataset", spec.dataset());
  if (spec.evaluation().enabled()) dataset("spec.evaluation.dataset", spec.evaluation().dataset());
  const auto& features = spec.clustering().features();
  for (int i = 0; i < features.paths_size(); ++i)
    check("spec.clustering.features.paths[" + std::to_string(i) + "]", features.paths(i));
  check("spec.clustering.features.keys", features.keys());
  check("spec.training.checkpoint_dir", spec.training().checkpoint_dir());
  return problems;
}

StatusOr<ParsedJob> ParseSubmission(const v1::SubmitJobRequest& request,
                                    const std::string& data_dir, const DataRoots* roots) {
  MLCD_RETURN_IF_ERROR(CheckRequestId(request.request_id()));
  ParsedJob parsed;
  if (!request.spec_yaml().empty()) {
    if (request.has_spec() || request.has_metadata()) {
      return Status::InvalidArgument(
          "spec_yaml and spec/metadata are both set; send the job either as YAML text or as "
          "messages");
    }
    MLCD_ASSIGN_OR_RETURN(parsed, LoadJobSpecYaml(request.spec_yaml()));
  } else {
    if (!request.has_spec()) {
      return Status::InvalidArgument(
          "empty request: set spec_yaml (the job as YAML, e.g. `mlcdctl submit job.yaml`) or spec");
    }
    parsed.spec = request.spec();
    parsed.metadata = request.metadata();
    ApplyJobSpecDefaults(&parsed.spec);
    std::vector<SpecProblem> problems = JobMetadataProblems(parsed.metadata);
    for (auto& p : JobSpecProblems(parsed.spec)) problems.push_back(std::move(p));
    MLCD_RETURN_IF_ERROR(SpecProblemsToStatus(problems));
  }
  // Confinement first: nothing below may look at a path outside the roots, so no answer
  // (dry run or not) tells whether one exists.
  if (roots) MLCD_RETURN_IF_ERROR(SpecProblemsToStatus(ConfinedPathProblems(parsed.spec, *roots)));
  MLCD_RETURN_IF_ERROR(SpecProblemsToStatus(InputProblems(parsed.spec)));
  MLCD_RETURN_IF_ERROR(ResolveDatasetIndexes(data_dir, &parsed.spec, roots));
  MLCD_RETURN_IF_ERROR(CheckDatasetInputs(parsed.spec, roots));
  return parsed;
}

StatusOr<ListJobsQuery> ParseListJobs(const v1::ListJobsRequest& request) {
  if (request.page_size() < 0)
    return Status::InvalidArgument("page_size: " + std::to_string(request.page_size()) +
                                   " must be >= 0");
  ListJobsQuery query;
  query.page_size = request.page_size() == 0 ? 100 : std::min(request.page_size(), 1000);
  for (int s : request.states()) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) {
      return Status::InvalidArgument("states: " + std::to_string(s) + " is not a job state");
    }
    query.states.insert(s);
  }
  if (!request.page_token().empty()) {
    char* end = nullptr;
    long long v = std::strtoll(request.page_token().c_str(), &end, 10);
    if (*end != '\0' || v <= 0) {
      return Status::InvalidArgument(
          "page_token: '" + request.page_token() +
          "' is not a token this server returned (pass next_page_token unchanged)");
    }
    query.before_seq = v;
  }
  return query;
}

std::vector<SpecProblem> InputProblems(const v1::JobSpec& spec) {
  std::vector<SpecProblem> problems;
  std::string images, labels;
  // Image-folder and webdataset datasets: CheckDatasetInputs (coordinator/dataset_checks.h).
  const bool mnist = !IsIndexedFormat(spec.dataset().format());
  Status s =
      mnist ? FindMnistSplit(spec.dataset().path(), "train", &images, &labels) : Status::Ok();
  if (!s.ok()) problems.push_back({"spec.dataset.path", s.message()});
  if (spec.evaluation().enabled() && !IsIndexedFormat(spec.evaluation().dataset().format()) &&
      spec.evaluation().dataset().path() != spec.dataset().path()) {
    Status e = FindMnistSplit(spec.evaluation().dataset().path(), "test", &images, &labels);
    if (!e.ok()) problems.push_back({"spec.evaluation.dataset.path", e.message()});
  }
  const auto& features = spec.clustering().features();
  if (features.kind() == "npy") {
    for (int i = 0; i < features.paths_size(); ++i) {
      if (!PathExists(features.paths(i))) {
        problems.push_back(
            {"spec.clustering.features.paths[" + std::to_string(i) + "]",
             "'" + features.paths(i) + "' does not exist (paths are read on the cluster's hosts)"});
      }
    }
  }
  const std::string& ckpt = spec.training().checkpoint_dir();
  if (!ckpt.empty() && ckpt[0] != '/') {
    problems.push_back({"spec.training.checkpoint_dir", "'" + ckpt + "' must be an absolute path"});
  }
  return problems;
}

Status CheckWorkerSupport(const v1::JobSpec& spec, const WorkerRegistry& workers,
                          Clock::time_point now) {
  auto check = [&](v1::AssignmentKind kind, const std::string& field,
                   const std::string& hint) -> Status {
    int alive = 0, capable = 0;
    workers.Count(kind, now, &alive, &capable);
    if (alive > 0 && capable == 0) {
      return Status::FailedPrecondition(field + " needs workers that can " + KindName(kind) +
                                        ", and none of the " + std::to_string(alive) +
                                        " registered workers can; " + hint);
    }
    return Status::Ok();
  };
  if (spec.training().rounds() > 1) {
    MLCD_RETURN_IF_ERROR(
        check(v1::ASSIGNMENT_KIND_EXTRACT,
              "spec.training.rounds: " + std::to_string(spec.training().rounds()),
              "set rounds: 1 or start workers whose mlcd-worker has the embed command"));
  }
  // A given label set (clustering.label_set) replaces the features and the clustering.
  const bool clusters = spec.clustering().label_set().empty();
  if (clusters && spec.clustering().features().kind() == "model") {
    MLCD_RETURN_IF_ERROR(check(v1::ASSIGNMENT_KIND_EXTRACT, "spec.clustering.features.kind: model",
                               "use features kind pixels, random-projection or npy"));
  }
  if (clusters && GangClusters(spec)) {
    // Both gangs of a round run on the job's workers: a worker that advertises only one of
    // the kinds (another mlcd-worker build) cannot finish the round.
    for (const v1::AssignmentKind kind :
         {v1::ASSIGNMENT_KIND_CLUSTER, v1::ASSIGNMENT_KIND_ASSIGN_LABELS}) {
      MLCD_RETURN_IF_ERROR(
          check(kind, "spec.clustering.engine: gang",
                "set engine: clusterd or start workers whose mlcd-worker has the cluster-gang "
                "command"));
    }
  }
  if (spec.evaluation().enabled()) {
    MLCD_RETURN_IF_ERROR(
        check(v1::ASSIGNMENT_KIND_EVALUATE, "spec.evaluation.enabled: true",
              "set evaluation.enabled: false or start workers whose mlcd-worker has the eval "
              "command"));
  }
  return Status::Ok();
}

Status CheckRequestId(const std::string& request_id) {
  if (request_id.size() > 200) {
    return Status::InvalidArgument("request_id: longer than 200 characters");
  }
  for (char c : request_id) {
    if (!std::isprint(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("request_id: only printable characters are allowed");
    }
  }
  return Status::Ok();
}

Status CheckRegistration(const v1::RegisterWorkerRequest& request) {
  if (!ValidName(request.name(), 100)) {
    return Status::InvalidArgument(
        "name: '" + request.name() +
        "' must be 1 to 100 letters, digits, '-', '_' or '.' (stable per worker slot)");
  }
  if (request.host().empty())
    return Status::InvalidArgument("host: empty; give the host other workers reach this one at");
  if (request.host().size() > kMaxHostLength)
    return Status::InvalidArgument("host: longer than " + std::to_string(kMaxHostLength) +
                                   " bytes; give a host name or address");
  for (char c : request.host()) {
    if (!std::isgraph(static_cast<unsigned char>(c)))
      return Status::InvalidArgument("host: only printable characters without spaces");
  }
  MLCD_RETURN_IF_ERROR(CheckRendezvousPort(request.rendezvous_port()));
  for (int kind : request.kinds()) {
    if (!v1::AssignmentKind_IsValid(kind) || kind == v1::ASSIGNMENT_KIND_NONE) {
      return Status::InvalidArgument("kinds: " + std::to_string(kind) +
                                     " is not an assignment kind");
    }
  }
  return Status::Ok();
}

Status CheckCancel(const v1::CancelJobRequest& request) {
  if (request.id().empty())
    return Status::InvalidArgument("id: empty; give a job id (see `mlcdctl list`)");
  if (request.reason().size() > kMaxCancelReasonLength) {
    return Status::InvalidArgument("reason: " + std::to_string(request.reason().size()) +
                                   " bytes; at most " + std::to_string(kMaxCancelReasonLength));
  }
  return Status::Ok();
}

Status CheckPoll(const v1::GetAssignmentRequest& request, int max_poll_seconds) {
  if (request.wait_seconds() < 0 || request.wait_seconds() > max_poll_seconds) {
    return Status::InvalidArgument("wait_seconds: " + std::to_string(request.wait_seconds()) +
                                   " is not in [0, " + std::to_string(max_poll_seconds) + "]");
  }
  return CheckRendezvousPort(request.rendezvous_port());
}

std::string JobIdFor(const std::string& name, int64_t seq) {
  std::string base;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') base += c;
  }
  if (base.empty()) base = "job";
  if (base.size() > 60) base = base.substr(0, 60);
  return base + "-" + std::to_string(seq);
}

std::unique_ptr<JobEntry> NewJobEntry(const v1::SubmitJobRequest& request, const ParsedJob& parsed,
                                      int64_t seq) {
  auto job = std::make_unique<JobEntry>();
  v1::Job& j = job->job();
  j.set_id(request.dry_run() ? "" : JobIdFor(parsed.metadata.name(), seq));
  *j.mutable_metadata() = parsed.metadata;
  *j.mutable_spec() = parsed.spec;
  j.set_state(v1::JOB_STATE_PENDING);
  j.set_request_id(request.request_id());
  j.set_created_unix_ms(NowUnixMs());
  j.set_updated_unix_ms(j.created_unix_ms());
  j.mutable_progress()->set_rounds(parsed.spec.training().rounds());
  j.mutable_progress()->set_epochs_per_round(parsed.spec.training().epochs_per_round());
  j.set_message("submitted");
  job->rec.set_seq(seq);
  job->rec.set_state_entered_unix_ms(j.created_unix_ms());
  job->state_entered = Clock::now();
  return job;
}

}  // namespace mlcd::coordinator
