#include "coordinator/phase_runner.h"

#include <algorithm>
#include <cstdio>

#include "clients/clusterd_client.h"
#include "clients/labelstore_client.h"
#include "common/acting_for.h"
#include "common/dataset/feature_keys.h"
#include "common/enums.h"
#include "common/fashion_mnist_features.h"
#include "common/file_util.h"
#include "common/format.h"
#include "common/hash.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/npy.h"
#include "common/spec_defaults.h"
#include "coordinator/dataset_checks.h"
#include "coordinator/gang_clustering.h"
#include "coordinator/given_label_set.h"
#include "coordinator/tensorboard_log.h"

namespace mlcd::coordinator {
namespace {

// For feature shards `<name>.npy` that each have `<name>.labels.npy` beside them (mlcd-worker
// embed writes the images' class labels there), writes their concatenation, in shard order,
// to `out` and returns true; returns false, writing nothing, when any shard has none. The
// labels are read confined to `roots` (a link beside a shard leading outside is refused).
StatusOr<bool> GatherShardClassLabels(const google::protobuf::RepeatedPtrField<std::string>& shards,
                                      const std::string& out, const DataRoots* roots) {
  std::vector<int64_t> all;
  for (const std::string& shard : shards) {
    const std::string suffix = ".npy";
    if (shard.size() <= suffix.size() ||
        shard.compare(shard.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return false;  // a directory of shards: their labels are not gathered
    }
    const std::string labels = shard.substr(0, shard.size() - suffix.size()) + ".labels.npy";
    StatusOr<std::vector<int64_t>> part = ReadNpyAsInt64(labels, nullptr, roots);
    if (part.status().code() == StatusCode::kNotFound) return false;
    if (!part.ok()) return part.status();
    all.insert(all.end(), part->begin(), part->end());
  }
  if (all.empty()) return false;
  MLCD_RETURN_IF_ERROR(
      WriteNpy(out, NpyDtype::kInt64, {static_cast<int64_t>(all.size())}, all.data()));
  return true;
}

// Round-0 features of the job's dataset (no output paths).
void DescribeGeneratedFeatures(const v1::JobSpec& spec, v1::GeneratedFeatures* generate) {
  const auto& features = spec.clustering().features();
  generate->set_kind(features.kind());
  generate->set_dataset_format(spec.dataset().format());
  generate->set_dataset_path(spec.dataset().path());
  generate->set_limit(spec.dataset().limit());
  generate->set_dim(features.dim());
  generate->set_seed(features.seed());
}

// Codes after which a clusterd call is retried (the service is restarting or overloaded).
bool IsTransient(const Status& status) {
  switch (status.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:
    case StatusCode::kResourceExhausted:
    case StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

// A clusterd client whose calls act for job `job_id` (common/acting_for.h): the job's label
// sets belong to the job, and only its phases change them.
clusterd::ClusterdClientOptions ForJob(const std::string& job_id) {
  clusterd::ClusterdClientOptions options;
  options.acting_for = ActingForJob(job_id);
  return options;
}

// A label-store client whose calls act for job `job_id`: only the job makes, seals and
// deletes its sets.
labelstore::LabelStoreClient JobLabelStore(const std::string& address, const std::string& job_id) {
  labelstore::LabelStoreClientOptions options;
  options.acting_for = ActingForJob(job_id);
  return labelstore::LabelStoreClient(address, options);
}

}  // namespace

struct PhaseRunner::Slot {
  bool done = false;  // guarded by the JobManager's mutex
  PhaseOutcome outcome;
};

PhaseRunner::PhaseRunner(PhaseRunnerOptions options, JobTable* jobs, Mutex* mu,
                         std::condition_variable* tick)
    : options_(std::move(options)), jobs_(jobs), mu_(mu), tick_(tick) {}

void PhaseRunner::Launch(JobEntry* job) {
  job->phase_running = true;
  job->control = std::make_shared<clusterd::CallControl>();
  auto slot = std::make_shared<Slot>();
  PhaseOutcome& outcome = slot->outcome;
  outcome.job_id = job->job().id();
  outcome.generation = job->phase_generation;
  outcome.kind = KindOfPhase(*job);
  outcome.round = job->job().rounds_size() - 1;
  const std::string round_text = RoundText(outcome.round, job->spec().training().rounds());
  outcome.what = job->state() == v1::JOB_STATE_CLUSTERING ? "clustering " + round_text
                                                          : "assigning labels of " + round_text;
  auto control = job->control;
  StartThread(slot, [this, snapshot = job->rec, control](PhaseOutcome* out) {
    switch (out->kind) {
      case PhaseKind::kPlanRound: {
        out->round_record = snapshot.job().rounds(out->round);
        v1::FeatureSource unused;
        out->status = PlanRound(snapshot, out->round, &unused, &out->round_record);
        return;
      }
      case PhaseKind::kCluster:
        return RunClustering(snapshot, control.get(), out);
      case PhaseKind::kPrepareSet:
        return RunPreparingSet(snapshot, out);
      case PhaseKind::kSealSet:
        return RunSealing(snapshot, out);
      case PhaseKind::kAssign:
        return RunAssigning(snapshot, control.get(), out);
      case PhaseKind::kDeleteSet:
        break;
    }
    out->status = Status::Internal("a delete is not launched as a job's phase");
  });
}

PhaseKind PhaseRunner::KindOfPhase(const JobEntry& job) {
  const bool gang = GangClusters(job.spec());
  if (job.state() == v1::JOB_STATE_CLUSTERING)
    return gang ? PhaseKind::kPlanRound : PhaseKind::kCluster;
  if (!gang) return PhaseKind::kAssign;
  // The labelling gang needs the set's write delegation, which a restarted coordinator no
  // longer holds: the set is then made again (a partial one is deleted first anyway).
  const v1::RoundStatus* round = job.round();
  const bool delegated =
      job.label_writes && round && job.label_writes->label_set == round->label_set();
  return round && !round->labels_written() && (round->label_set().empty() || !delegated)
             ? PhaseKind::kPrepareSet
             : PhaseKind::kSealSet;
}

std::string ClusteredMessage(const std::string& round_text, const v1::ClusterResult& result,
                             int workers) {
  return round_text + ": clustered " + std::to_string(result.num_points()) + " points into " +
         std::to_string(result.k()) + " centres in " + Fixed(result.seconds(), 1) + " s" +
         (workers > 0 ? " on " + std::to_string(workers) + " workers" : "");
}

void PhaseRunner::StartThread(std::shared_ptr<Slot> slot, std::function<void(PhaseOutcome*)> body) {
  PhaseThread t;
  t.slot = slot;
  t.thread = std::thread([this, slot, body = std::move(body)]() {
    // Nothing a phase meets may take the coordinator down: an exception fails the phase.
    try {
      body(&slot->outcome);
    } catch (const std::exception& e) {
      slot->outcome.status = Status::Internal(std::string("unexpected error: ") + e.what());
    } catch (...) {
      slot->outcome.status = Status::Internal("unexpected error of unknown type");
    }
    {
      MutexLock lock(mu_);
      slot->done = true;
    }
    tick_->notify_all();
  });
  threads_.push_back(std::move(t));
}

void PhaseRunner::DeletePartialSet(const std::string& job_id, const std::string& label_set) {
  if (stopping_) return;
  pending_deletions_.push_back({job_id, label_set});
  LaunchDeletions();
}

bool PhaseRunner::Running(const std::string& job_id) const {
  for (const PhaseThread& t : threads_) {
    // outcome.job_id is set before the thread starts and never changed by it.
    if (!t.slot->done && t.slot->outcome.job_id == job_id) return true;
  }
  return false;
}

void PhaseRunner::LaunchDeletions() {
  for (auto it = pending_deletions_.begin(); it != pending_deletions_.end();) {
    if (stopping_ || Running(it->job_id)) {
      ++it;
      continue;
    }
    auto slot = std::make_shared<Slot>();
    slot->outcome.kind = PhaseKind::kDeleteSet;
    slot->outcome.job_id = it->job_id;  // generation 0 and a job that ended: never applied
    slot->outcome.label_set = it->label_set;
    slot->outcome.what = "deleting the partial label set " + it->label_set;
    StartThread(slot, [this](PhaseOutcome* out) {
      labelstore::LabelStoreClient client = JobLabelStore(options_.labelstore_address, out->job_id);
      StatusOr<v1::DeleteLabelSetResponse> deleted = client.Delete(out->label_set, true);
      if (deleted.ok()) {
        MLCD_LOG(INFO) << "job " << out->job_id << " ended during ASSIGNING: deleted its partial "
                       << "label set " << out->label_set;
      } else {
        out->status = deleted.status();
        MLCD_LOG(WARNING) << "job " << out->job_id << " ended during ASSIGNING, but its partial "
                          << "label set " << out->label_set
                          << " could not be deleted: " << deleted.status().ToString()
                          << "; delete it with `mlcdctl labels "
                          << "delete " << out->label_set << "` as an admin";
      }
    });
    it = pending_deletions_.erase(it);
  }
}

std::vector<PhaseOutcome> PhaseRunner::CollectFinished() {
  std::vector<PhaseOutcome> outcomes;
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->slot->done) {
      it->thread.join();
      outcomes.push_back(std::move(it->slot->outcome));
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
  LaunchDeletions();
  return outcomes;
}

void PhaseRunner::JoinAll() {
  std::vector<PhaseThread> threads;
  {
    MutexLock lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) {
    if (t.thread.joinable()) t.thread.join();
  }
}

JobEntry* PhaseRunner::StillCurrent(const std::string& job_id, uint64_t generation) {
  if (stopping_) return nullptr;
  JobEntry* job = jobs_->Find(job_id);
  if (!job || job->phase_generation != generation || IsTerminal(job->state())) return nullptr;
  return job;
}

void PhaseRunner::Publish(const PhaseOutcome& phase, const std::string& detail) {
  MutexLock lock(mu_);
  if (JobEntry* job = StillCurrent(phase.job_id, phase.generation)) {
    job->job().mutable_progress()->set_detail(detail);
    jobs_->Touch(job);
  }
}

bool PhaseRunner::HandleError(JobEntry* job, const PhaseOutcome& outcome) {
  const std::string& what = outcome.what;
  const Status& status = outcome.status;
  job->phase_running = false;
  job->control.reset();
  // Only clusterd dying under a call it had taken keeps the attempt counted; the next
  // Launch persists the count.
  if (!(outcome.call_started && status.code() == StatusCode::kUnavailable))
    job->rec.set_phase_attempts(0);
  if (!IsTransient(status)) return false;
  job->transient_failures = std::min(job->transient_failures + 1, 6);
  const int delay = 1 << (job->transient_failures - 1);  // 1, 2, 4 ... 32 s
  job->retry_after = Clock::now() + std::chrono::seconds(delay);
  job->job().mutable_progress()->set_detail(what + " failed, retrying in " + std::to_string(delay) +
                                            " s: " + status.ToString());
  job->job().set_message(job->job().progress().detail());
  MLCD_LOG(WARNING) << "job " << job->job().id() << ": " << job->job().progress().detail();
  jobs_->Touch(job);
  return true;
}

// ---------------------------------------------------------------------------------------
// CLUSTERING.

Status PhaseRunner::PlanFeatures(const v1::JobSpec& spec, int r, const std::string& round_dir,
                                 v1::RoundStatus* round, v1::FeatureSource* source) const {
  if (!round->feature_paths().empty()) {
    for (const auto& p : round->feature_paths()) source->add_paths(p);
    for (const auto& p : round->feature_ids_paths()) source->add_ids_paths(p);
    return Status::Ok();
  }
  const auto& features = spec.clustering().features();
  if (features.kind() == "npy") {
    std::vector<std::string> ids;
    if (!features.keys().empty()) {
      // Rows aligned by key: one sample-id file per shard (docs/data.md).
      MLCD_ASSIGN_OR_RETURN(
          ids, WriteAlignedFeatureIds(spec, round_dir + "/feature-ids", options_.data_roots));
    }
    for (const auto& p : features.paths()) {
      round->add_feature_paths(p);
      source->add_paths(p);
    }
    for (const auto& p : ids) {
      round->add_feature_ids_paths(p);
      source->add_ids_paths(p);
    }
    round->set_feature_source(ids.empty() ? "npy" : "npy aligned by " + features.keys());
    return Status::Ok();
  }
  if (features.kind() != "pixels" && features.kind() != "random-projection")
    return Status::Internal("round " + std::to_string(r) + " has no features to cluster");
  if (GangClusters(spec)) {
    // The gang's ranks compute them, each its own rows: nothing is written.
    DescribeGeneratedFeatures(spec, round->mutable_generated_features());
    round->set_feature_source(features.kind() + " (computed by the clustering gang)");
    return Status::Ok();
  }
  // Round-0 features of the dataset, written by clusterd into a cache shared by jobs.
  char name[160];
  std::snprintf(name, sizeof(name), "%s-%s-d%d-s%llu-n%llu-%016llx",
                spec.dataset().format().c_str(), features.kind().c_str(),
                features.kind() == "pixels" ? 784 : features.dim(),
                static_cast<unsigned long long>(features.seed()),
                static_cast<unsigned long long>(spec.dataset().limit()),
                static_cast<unsigned long long>(Fnv1a(spec.dataset().path())));
  const std::string dir = options_.data_dir + "/features/" + name;
  v1::GeneratedFeatures* generate = source->mutable_generate();
  DescribeGeneratedFeatures(spec, generate);
  generate->set_features_out(dir + "/features.npy");
  generate->set_labels_out(dir + "/classes.labels.npy");
  round->add_feature_paths(generate->features_out());
  round->set_class_labels_path(generate->labels_out());
  round->set_feature_source(features.kind() + " (" + dir + ")");
  return Status::Ok();
}

Status PhaseRunner::PlanRound(const v1::JobRecord& snapshot, int r, v1::FeatureSource* source,
                              v1::RoundStatus* round) const {
  const std::string dir = JobDir(options_.data_dir, snapshot.job().id()) + "/r" + std::to_string(r);
  MLCD_RETURN_IF_ERROR(PlanFeatures(snapshot.job().spec(), r, dir, round, source));
  MLCD_RETURN_IF_ERROR(MakeDirs(dir));
  if (round->class_labels_path().empty()) {
    // Extracted shards carry their images' class labels when the dataset has them: gather
    // them so a model-feature round reports label quality (A.8) like round 0 does.
    auto gathered = GatherShardClassLabels(round->feature_paths(), dir + "/class-labels.npy",
                                           options_.data_roots);
    if (!gathered.ok()) {
      MLCD_LOG(WARNING) << "round " << r << " of job " << snapshot.job().id()
                        << ": no label quality report: " << gathered.status().ToString();
    } else if (*gathered) {
      round->set_class_labels_path(dir + "/class-labels.npy");
    }
  }
  round->set_centroids_path(dir + "/centroids.npy");
  if (!GangClusters(snapshot.job().spec())) return Status::Ok();
  return PlanGangFeatures(snapshot.job().spec().clustering().k(), options_.data_roots, round);
}

void PhaseRunner::RunClustering(const v1::JobRecord& snapshot, clusterd::CallControl* control,
                                PhaseOutcome* out) {
  const v1::JobSpec& spec = snapshot.job().spec();
  const int r = out->round;
  v1::RoundStatus round = snapshot.job().rounds(r);
  v1::ClusterRequest request;
  Status status = PlanRound(snapshot, r, request.mutable_features(), &round);
  if (status.ok()) {
    request.set_k(spec.clustering().k());
    request.set_niter(spec.clustering().niter());
    request.set_seed(ClusteringRoundSeed(spec.clustering(), r));
    request.set_max_points_per_centroid(spec.clustering().max_points_per_centroid());
    request.set_centroids_out(round.centroids_path());
    request.set_request_id(snapshot.job().id() + "/r" + std::to_string(r));
    // ASSIGNING comes next and its top-1 labels give the same size summary: one pass less.
    request.set_skip_size_pass(true);
    Publish(*out, "k-means: k " + std::to_string(spec.clustering().k()) + " on " +
                      std::to_string(round.feature_paths_size()) + " feature shards");
    clusterd::ClusterdClient client(options_.clusterd_address, ForJob(snapshot.job().id()));
    const int niter = spec.clustering().niter();
    auto res = client.Cluster(
        request,
        [&](const v1::ClusterProgress& p) {
          out->call_started = true;
          if (p.has_iteration()) {
            Publish(*out, "k-means iteration " + std::to_string(p.iteration().iteration() + 1) +
                              "/" + std::to_string(niter) + ", objective " +
                              Fixed(p.iteration().objective(), 1));
          } else if (!p.note().empty()) {
            // clusterd's own words while it writes round-0 features; k-means notes otherwise.
            const bool as_is =
                p.note().rfind("k-means", 0) == 0 || p.note().rfind("writing round-0", 0) == 0;
            Publish(*out, as_is ? p.note() : "k-means: " + p.note());
          }
        },
        control);
    if (res.ok()) {
      out->cluster = *res;
    } else {
      status = res.status();
    }
  }
  out->status = status;
  out->round_record = std::move(round);
}

// ---------------------------------------------------------------------------------------
// ASSIGNING.

void PhaseRunner::RunAssigning(const v1::JobRecord& snapshot, clusterd::CallControl* control,
                               PhaseOutcome* out) {
  const v1::JobSpec& spec = snapshot.job().spec();
  const int r = out->round;
  const v1::RoundStatus& round = snapshot.job().rounds(r);
  const std::string label_set = RoundLabelSet(snapshot.job(), r);
  out->label_set = label_set;
  v1::AssignRequest request;
  for (const auto& p : round.feature_paths()) request.mutable_features()->add_paths(p);
  for (const auto& p : round.feature_ids_paths()) request.mutable_features()->add_ids_paths(p);
  request.set_centroids_path(round.centroids_path());
  request.set_l(spec.clustering().l());
  request.set_label_set(label_set);
  // The spec was validated: an unknown spelling cannot reach here (exact when empty).
  const StatusOr<SearchMethod> method = ParseSearchMethod(spec.clustering().search());
  request.set_method(method.ok() ? clusterd::SearchMethodToProto(*method)
                                 : v1::SEARCH_METHOD_EXACT);
  // An orphan of an earlier attempt (crash, failure) is replaced, never duplicated.
  request.set_replace_existing(true);
  if (!round.class_labels_path().empty()) request.set_class_labels_path(round.class_labels_path());
  (*request.mutable_metadata())["job"] = snapshot.job().id();
  (*request.mutable_metadata())["round"] = std::to_string(r);
  (*request.mutable_metadata())["centroids"] = round.centroids_path();
  request.set_request_id(label_set);
  Publish(*out, "assigning the top-" + std::to_string(spec.clustering().l()) +
                    " centres of every sample into " + label_set);
  clusterd::ClusterdClient client(options_.clusterd_address, ForJob(snapshot.job().id()));
  auto result = client.Assign(
      request,
      [&](const v1::AssignProgress& p) {
        out->call_started = true;
        if (!p.has_status()) return;
        Publish(*out, "assigning labels: " + std::to_string(p.status().rows_done()) + "/" +
                          std::to_string(p.status().rows_total()) + " samples");
      },
      control);
  if (result.ok()) {
    out->assign = *result;
    SummariseStage(snapshot, out);
  } else {
    out->status = result.status();
  }
}

void PhaseRunner::RunPreparingSet(const v1::JobRecord& snapshot, PhaseOutcome* out) {
  const v1::JobSpec& spec = snapshot.job().spec();
  const int r = out->round;
  const v1::RoundStatus& round = snapshot.job().rounds(r);
  out->label_set = RoundLabelSet(snapshot.job(), r);
  Publish(*out, "creating " + out->label_set + " for the gang's labels");
  labelstore::LabelStoreClient client =
      JobLabelStore(options_.labelstore_address, snapshot.job().id());
  // A set left by a failed attempt (partial, never sealed) or a crash is deleted first.
  StatusOr<v1::DeleteLabelSetResponse> deleted = client.Delete(out->label_set, true);
  if (!deleted.ok()) {
    out->status = deleted.status().WithContext("deleting the partial " + out->label_set);
    return;
  }
  labelstore::LabelSetSpec set;
  set.name = out->label_set;
  set.num_classes = spec.clustering().k();
  set.labels_per_sample = spec.clustering().l();
  set.with_scores = true;
  set.metadata["job"] = snapshot.job().id();
  set.metadata["round"] = std::to_string(r);
  set.metadata["centroids"] = round.centroids_path();
  set.metadata["method"] = SearchMethodName(SearchMethod::kExact);
  set.metadata["producer"] = "mlcd-worker cluster-gang";
  StatusOr<v1::LabelSetInfo> created = client.CreateLabelSet(set);
  if (!created.ok()) {
    out->status = created.status().WithContext("creating " + out->label_set);
    return;
  }
  // The ranks write by capabilities the coordinator mints from this delegation, never by
  // their own identities.
  StatusOr<labelstore::WriteDelegation> delegation = client.DelegateWrites(out->label_set);
  if (!delegation.ok()) {
    out->status = delegation.status().WithContext("delegating writes of " + out->label_set);
    return;
  }
  out->label_writes = {delegation->name, delegation->incarnation, delegation->key};
}

void PhaseRunner::RunSealing(const v1::JobRecord& snapshot, PhaseOutcome* out) {
  const int r = out->round;
  const v1::RoundStatus& round = snapshot.job().rounds(r);
  out->label_set = RoundLabelSet(snapshot.job(), r);
  out->assign = round.assign();
  Publish(*out, "sealing " + out->label_set + " (written by the gang)");
  labelstore::LabelStoreClient client =
      JobLabelStore(options_.labelstore_address, snapshot.job().id());
  // Sealing a sealed set is no error: a coordinator that died after sealing seals again.
  StatusOr<v1::LabelSetInfo> info = client.Seal(out->label_set);
  if (!info.ok()) {
    out->status = info.status().WithContext("sealing " + out->label_set);
    return;
  }
  out->call_started = true;
  if (info->num_samples() != round.assign().num_samples()) {
    out->status = Status::DataLoss("label set " + out->label_set + " holds " +
                                   std::to_string(info->num_samples()) +
                                   " samples after sealing, but the gang reported " +
                                   std::to_string(round.assign().num_samples()) + " rows written");
    return;
  }
  out->assign.set_label_set(out->label_set);
  out->assign.set_label_set_samples(info->num_samples());
  SummariseStage(snapshot, out);
}

void PhaseRunner::SummariseStage(const v1::JobRecord& snapshot, PhaseOutcome* out) {
  const v1::JobSpec& spec = snapshot.job().spec();
  if (!IsMcl(spec)) return;
  const int r = out->round;
  StageClusteringQuery query;
  query.label_set = out->label_set;
  if (r > 0) query.previous_label_set = snapshot.job().rounds(r - 1).label_set();
  query.k = spec.clustering().k();
  StatusOr<uint64_t> samples = TrainingSampleCount(spec);
  if (!samples.ok()) {
    out->status = samples.status();
    return;
  }
  query.samples = *samples;
  Publish(*out, "reading " + out->label_set + " back for its cluster sizes" +
                    (r > 0 ? " and its agreement with " + query.previous_label_set : ""));
  StatusOr<StageClustering> stage = SummariseStageClustering(
      JobLabelStore(options_.labelstore_address, snapshot.job().id()), query);
  if (!stage.ok()) {
    out->status = stage.status();
    return;
  }
  out->stage = std::move(*stage);
}

// ---------------------------------------------------------------------------------------
// Applying outcomes.

PhaseNext PhaseRunner::Apply(JobEntry* job, const PhaseOutcome& outcome) {
  const int r = outcome.round;
  const std::string round_text = RoundText(r, job->spec().training().rounds());
  v1::RoundStatus* live = job->job().mutable_rounds(r);
  if (outcome.kind == PhaseKind::kPlanRound) {
    *live = outcome.round_record;
    const std::string what =
        live->has_generated_features()
            ? live->generated_features().kind() + " features (each rank computes its rows)"
            : std::to_string(live->feature_paths_size()) + " feature shards";
    return {v1::JOB_STATE_UNSPECIFIED,
            round_text + ": " + what + " planned for the clustering gang"};
  }
  if (outcome.kind == PhaseKind::kCluster) {
    const v1::ClusterResult& result = outcome.cluster;
    *live = outcome.round_record;
    *live->mutable_cluster() = result;
    live->set_clustered(true);
    return {v1::JOB_STATE_ASSIGNING, ClusteredMessage(round_text, result)};
  }
  if (outcome.kind == PhaseKind::kPrepareSet) {
    live->set_label_set(outcome.label_set);
    job->label_writes = outcome.label_writes;
    return {v1::JOB_STATE_UNSPECIFIED,
            round_text + ": " + outcome.label_set + " created (OPEN) for the labelling gang"};
  }
  const v1::AssignResult& result = outcome.assign;
  *live->mutable_assign() = result;
  // The cluster record's size summary comes from this pass (CLUSTERING skipped its own).
  if (!live->cluster().has_sizes() && result.has_sizes())
    *live->mutable_cluster()->mutable_sizes() = result.sizes();
  live->set_label_set(result.label_set().empty() ? outcome.label_set : result.label_set());
  live->set_assigned(true);
  Status curves = WriteRoundScalars(job->job().tensorboard_dir(), *live);
  if (!curves.ok())
    MLCD_LOG(WARNING) << "TensorBoard scalars of " << round_text << ": " << curves.ToString();
  job->job().set_label_set(live->label_set());
  if (IsMcl(job->spec())) return AfterStageClustered(job, outcome);
  std::string quality;
  if (result.has_quality()) {
    quality = "; true class among top-1 / top-l clusters: " +
              Fixed(100 * result.quality().top1_recall(), 1) + "% / " +
              Fixed(100 * result.quality().topl_recall(), 1) + "%";
  }
  return {v1::JOB_STATE_TRAINING, round_text + ": " + std::to_string(result.num_samples()) +
                                      " samples labelled in " + live->label_set() + quality};
}

PhaseNext PhaseRunner::AfterStageClustered(JobEntry* job, const PhaseOutcome& outcome) {
  const int r = outcome.round;
  const int stages = job->spec().mcl().stages();
  v1::RoundStatus* live = job->job().mutable_rounds(r);
  std::string summary = StageText(r, stages) + ": " + std::to_string(outcome.assign.num_samples()) +
                        " samples clustered into " + live->label_set();
  if (outcome.stage) {
    live->clear_cluster_sizes();
    for (uint64_t size : outcome.stage->sizes) live->add_cluster_sizes(size);
    if (outcome.stage->adjusted_mutual_info) {
      live->set_adjusted_mutual_info(*outcome.stage->adjusted_mutual_info);
      summary += " (adjusted mutual information with " + StageText(r - 1, stages) + ": " +
                 Fixed(*outcome.stage->adjusted_mutual_info, 3) + ")";
    }
  }
  if (r + 1 < stages) {
    auto* next = job->job().add_rounds();
    next->set_round(r + 1);
    job->job().mutable_progress()->set_round(r + 1);
    job->job().mutable_progress()->set_epoch(0);
    return {v1::JOB_STATE_TRAINING,
            summary + "; training " + StageText(r + 1, stages) + " on its pseudo-labels"};
  }
  if (job->spec().evaluation().enabled())
    return {v1::JOB_STATE_EVALUATING, summary + "; evaluating the stages' concatenation"};
  return {v1::JOB_STATE_SUCCEEDED,
          summary + "; the job's model is its " + std::to_string(stages) + " stage encoders"};
}

}  // namespace mlcd::coordinator
