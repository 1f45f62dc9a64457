#include "clusterd/service.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "clients/clusterd_client.h"
#include "clients/labelstore_client.h"
#include "clients/labelstore_limits.h"
#include "clusterd/assign.h"
#include "clusterd/feature_request.h"
#include "clusterd/feature_source.h"
#include "clusterd/kmeans.h"
#include "clusterd/quality.h"
#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/format.h"
#include "common/log.h"
#include "common/npy.h"
#include "common/security.h"
#include "common/stopwatch.h"

namespace mlcd::clusterd {
namespace {

void FillSizes(const ClusterSizeSummary& s, v1::ClusterSizeSummary* out) {
  out->set_min(static_cast<uint64_t>(s.min));
  out->set_max(static_cast<uint64_t>(s.max));
  out->set_mean(s.mean);
  out->set_stddev(s.stddev);
  out->set_empty_clusters(static_cast<uint64_t>(s.empty_clusters));
  out->set_imbalance_factor(s.imbalance_factor);
}

// The k-means parameters of a request; zero fields keep SphericalKMeansParams' defaults.
StatusOr<SphericalKMeansParams> KMeansParamsFrom(const v1::ClusterRequest& request) {
  SphericalKMeansParams params;
  params.k = request.k();
  if (request.niter() != 0) params.niter = request.niter();
  if (request.seed() != 0) params.seed = request.seed();
  if (request.max_points_per_centroid() != 0)
    params.max_points_per_centroid = request.max_points_per_centroid();
  params.threads = request.threads();
  if (params.k < 1)
    return Status::InvalidArgument("k must be >= 1, got " + std::to_string(params.k));
  MLCD_RETURN_IF_ERROR(ValidateKMeansParams(params, INT64_MAX));
  return params;
}

// The assignment parameters of a request; zero fields keep AssignParams' defaults.
StatusOr<AssignParams> AssignParamsFrom(const v1::AssignRequest& request) {
  AssignParams params;
  params.l = request.l();
  MLCD_ASSIGN_OR_RETURN(params.method, SearchMethodFromProto(request.method()));
  params.threads = request.threads();
  params.search_effort = request.search_effort();
  if (request.recall_sample() != 0) params.recall_sample = request.recall_sample();
  if (request.chunk_rows() != 0) params.chunk_rows = request.chunk_rows();
  if (request.seed() != 0) params.seed = request.seed();
  if (params.l < 1)
    return Status::InvalidArgument("l must be >= 1, got " + std::to_string(params.l));
  if (params.recall_sample < 0) return Status::InvalidArgument("recall_sample must be >= 0");
  return params;
}

// The label set an Assign creates: k classes, l labels with scores per sample, the request's
// metadata plus where the labels came from.
labelstore::LabelSetSpec LabelSetSpecFor(const v1::AssignRequest& request,
                                         const AssignParams& params, int k,
                                         const std::string& centroids_path,
                                         const std::vector<std::string>& paths) {
  labelstore::LabelSetSpec spec;
  spec.name = request.label_set();
  spec.num_classes = k;
  spec.labels_per_sample = params.l;
  spec.with_scores = true;
  for (const auto& [key, value] : request.metadata()) spec.metadata[key] = value;
  spec.metadata["centroids"] = centroids_path;
  spec.metadata["features"] =
      paths.front() + (paths.size() > 1 ? " (+" + std::to_string(paths.size() - 1) + ")" : "");
  spec.metadata["method"] = SearchMethodName(params.method);
  spec.metadata["producer"] = "mlcd-clusterd";
  return spec;
}

// Creates the set (deleting an existing one first when `replace_existing`).
Status CreateLabelSet(labelstore::LabelStoreClient* store, const labelstore::LabelSetSpec& spec,
                      bool replace_existing, const std::function<void(const std::string&)>& note) {
  if (replace_existing) {
    MLCD_ASSIGN_OR_RETURN(v1::DeleteLabelSetResponse deleted,
                          store->Delete(spec.name, /*allow_missing=*/true));
    if (deleted.deleted()) {
      note("deleted the existing label set " + spec.name + " (" +
           std::to_string(deleted.rows_deleted()) + " rows)");
    }
  }
  StatusOr<v1::LabelSetInfo> created = store->CreateLabelSet(spec);
  if (!created.ok()) {
    if (created.status().code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists(
          "label set " + spec.name +
          " already exists; delete it (mlcdctl labels delete) or set replace_existing");
    }
    return created.status().WithContext("creating label set " + spec.name);
  }
  return Status::Ok();
}

// Deletes the label set at the end of its scope unless *keep.
struct UnfinishedLabelSet {
  labelstore::LabelStoreClient* store;
  const std::string* name;
  bool* keep;
  ~UnfinishedLabelSet() {
    if (*keep) return;
    StatusOr<v1::DeleteLabelSetResponse> del = store->Delete(*name, /*allow_missing=*/true);
    if (!del.ok()) {
      MLCD_LOG(WARNING) << "could not delete the unfinished label set " << *name << ": "
                        << del.status().ToString();
    }
  }
};

void FillAssignResult(const v1::AssignRequest& request, const std::string& label_set, int64_t rows,
                      int k, int l, const AssignStats& stats, const v1::LabelSetInfo& sealed,
                      const std::optional<LabelQuality>& label_quality, v1::AssignResult* result) {
  result->set_label_set(label_set);
  result->set_num_samples(static_cast<uint64_t>(rows));
  result->set_l(l);
  result->set_k(k);
  result->set_approx_recall(stats.approx_recall);
  result->set_recall_rows(static_cast<uint64_t>(stats.recall_rows));
  FillSizes(SummarizeClusterSizes(stats.top1_sizes), result->mutable_sizes());
  result->set_search_seconds(stats.search_seconds);
  result->set_method(request.method() == v1::SEARCH_METHOD_UNSPECIFIED ? v1::SEARCH_METHOD_EXACT
                                                                       : request.method());
  result->set_label_set_samples(sealed.num_samples());
  if (label_quality) {
    const LabelQuality& q = *label_quality;
    auto* out = result->mutable_quality();
    out->set_top1_recall(q.top1_recall);
    out->set_topl_recall(q.topl_recall);
    out->set_nmi(q.nmi);
    out->set_num_classes(static_cast<uint64_t>(q.num_classes));
    out->set_clusters_used(static_cast<uint64_t>(q.clusters_used));
  }
}

// Assign's checks that need no data. The label store is never a caller-chosen address (the
// daemon would dial, and with replace_existing delete sets, wherever it is told): only the one
// it was started with (`own`).
Status CheckAssignRequest(const v1::AssignRequest& request, const std::string& own) {
  MLCD_RETURN_IF_ERROR(CheckFeatureSource(request.features()));
  if (request.centroids_path().empty())
    return Status::InvalidArgument("centroids_path is required");
  if (request.label_set().empty())
    return Status::InvalidArgument("label_set (the name of the set to create) is required");
  MLCD_RETURN_IF_ERROR(labelstore::ValidateLabelSetName(request.label_set()));
  const std::string& requested = request.labelstore();
  if (!requested.empty() && requested != own) {
    return Status(StatusCode::kPermissionDenied,
                  "labelstore: mlcd-clusterd writes only to the label store it was started with "
                  "(--labelstore); leave AssignRequest.labelstore empty (the field is "
                  "deprecated)");
  }
  if (own.empty())
    return Status::FailedPrecondition(
        "mlcd-clusterd has no label store: start it with --labelstore ADDRESS");
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Metrics

struct ClusterdService::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : jobs_running(prometheus::BuildGauge()
                         .Name("mlcd_clusterd_jobs_running")
                         .Help("Clustering jobs (Cluster or Assign) running now")
                         .Register(r)
                         .Add({})),
        jobs_queued(prometheus::BuildGauge()
                        .Name("mlcd_clusterd_jobs_queued")
                        .Help("Calls waiting for the running job")
                        .Register(r)
                        .Add({})),
        iterations(prometheus::BuildCounter()
                       .Name("mlcd_clusterd_kmeans_iterations_total")
                       .Help("k-means iterations completed")
                       .Register(r)
                       .Add({})),
        iteration_seconds(prometheus::BuildHistogram()
                              .Name("mlcd_clusterd_kmeans_iteration_seconds")
                              .Help("Duration of one k-means iteration")
                              .Register(r)
                              .Add({}, LatencyBuckets())),
        objective(prometheus::BuildGauge()
                      .Name("mlcd_clusterd_kmeans_objective")
                      .Help("Objective (sum of inner products to the nearest centroid) of the last "
                            "iteration")
                      .Register(r)
                      .Add({})),
        mean_similarity(prometheus::BuildGauge()
                            .Name("mlcd_clusterd_kmeans_mean_similarity")
                            .Help("Objective of the last iteration divided by the training rows")
                            .Register(r)
                            .Add({})),
        imbalance(prometheus::BuildGauge()
                      .Name("mlcd_clusterd_kmeans_imbalance_factor")
                      .Help("Imbalance factor of the last iteration's assignment (1 = balanced)")
                      .Register(r)
                      .Add({})),
        iteration(prometheus::BuildGauge()
                      .Name("mlcd_clusterd_kmeans_iteration")
                      .Help("Index of the last completed iteration of the current or last k-means")
                      .Register(r)
                      .Add({})),
        target_iterations(prometheus::BuildGauge()
                              .Name("mlcd_clusterd_kmeans_target_iterations")
                              .Help("Iterations the current or last k-means runs (its niter)")
                              .Register(r)
                              .Add({})),
        rows_read(prometheus::BuildCounter()
                      .Name("mlcd_clusterd_rows_read_total")
                      .Help("Feature rows read from shards for training")
                      .Register(r)
                      .Add({})),
        assign_rows(prometheus::BuildCounter()
                        .Name("mlcd_clusterd_assign_rows_total")
                        .Help("Rows given their top-l centroids (Assign and Cluster's size pass)")
                        .Register(r)
                        .Add({})),
        assign_rate(prometheus::BuildGauge()
                        .Name("mlcd_clusterd_assign_rows_per_second")
                        .Help("Rows per second of the current or last assignment pass")
                        .Register(r)
                        .Add({})),
        approx_recall(prometheus::BuildGauge()
                          .Name("mlcd_clusterd_assign_approx_recall")
                          .Help("Recall@l of the last approximate assignment against exact search")
                          .Register(r)
                          .Add({})),
        top1_recall(prometheus::BuildGauge()
                        .Name("mlcd_clusterd_label_top1_recall")
                        .Help("Last assignment with class labels: recall of the true class by the "
                              "top-1 cluster")
                        .Register(r)
                        .Add({})),
        topl_recall(prometheus::BuildGauge()
                        .Name("mlcd_clusterd_label_topl_recall")
                        .Help("Last assignment with class labels: recall of the true class by the "
                              "top-l clusters")
                        .Register(r)
                        .Add({})),
        nmi(prometheus::BuildGauge()
                .Name("mlcd_clusterd_label_nmi")
                .Help("Last assignment with class labels: NMI of the top-1 assignment")
                .Register(r)
                .Add({})) {}

  prometheus::Gauge& jobs_running;
  prometheus::Gauge& jobs_queued;
  prometheus::Counter& iterations;
  prometheus::Histogram& iteration_seconds;
  prometheus::Gauge& objective;
  prometheus::Gauge& mean_similarity;
  prometheus::Gauge& imbalance;
  prometheus::Gauge& iteration;
  prometheus::Gauge& target_iterations;
  prometheus::Counter& rows_read;
  prometheus::Counter& assign_rows;
  prometheus::Gauge& assign_rate;
  prometheus::Gauge& approx_recall;
  prometheus::Gauge& top1_recall;
  prometheus::Gauge& topl_recall;
  prometheus::Gauge& nmi;
};

// ---------------------------------------------------------------------------------------------
// Service

ClusterdService::ClusterdService(ClusterdOptions options, prometheus::Registry& registry)
    : options_(std::move(options)),
      gate_(options_.max_queued),
      rpc_metrics_(registry, "clusterd"),
      metrics_(std::make_unique<Metrics>(registry)) {
  for (const char* method : {"Cluster", "Assign"}) rpc_metrics_.Declare(method);
}

ClusterdService::~ClusterdService() = default;

StatusOr<std::string> ClusterdService::Resolve(const std::string& path,
                                               const std::string& field) const {
  std::string full = path;
  if (!path.empty() && path[0] != '/') {
    char cwd[4096];
    const std::string here = getcwd(cwd, sizeof(cwd)) ? cwd : "/";
    const std::string& dir = options_.data_dir;
    const std::string base = dir.empty() ? here : dir[0] == '/' ? dir : here + "/" + dir;
    full = base + "/" + path;
  }
  return options_.data_roots.Confine(full, field);
}

PathResolver ClusterdService::Resolver() const {
  return [this](const std::string& path, const std::string& field) { return Resolve(path, field); };
}

namespace {

// The request's feature shards; a link in a listed folder must resolve under `roots`.
StatusOr<FeatureShards> OpenShards(const FeatureInputs& inputs, const DataRoots& roots) {
  return FeatureShards::Open(inputs.paths, inputs.ids_paths, &roots);
}

// Writes k x d centroids to `out_path` (checked when the call arrived). Its directory is made
// and opened under the roots again and the file created inside that descriptor, so a folder
// swapped for a link since the check is refused (as a path outside the roots), not followed.
Status WriteCentroids(const std::string& out_path, const std::vector<float>& centroids, int k,
                      int d, const DataRoots& roots) {
  std::string name;
  MLCD_ASSIGN_OR_RETURN(ConfinedDir dir, OpenConfinedParent(out_path, "centroids_out",
                                                            /*create=*/true, &name, &roots));
  return WriteNpyIn(dir, name, NpyDtype::kFloat32, {k, d}, centroids.data());
}

// Holds the job slot for the scope of a job and keeps the gauges current.
class JobSlot {
 public:
  JobSlot(JobGate* gate, prometheus::Gauge* running, prometheus::Gauge* queued)
      : gate_(gate), running_(running), queued_(queued) {}
  // Waits for the slot; `note` hears the queue position while the job waits.
  Status Acquire(const std::function<bool()>& should_stop,
                 const std::function<void(const std::string&)>& note) {
    queued_->Increment();
    Status st = gate_->Acquire(should_stop, [&](int position) {
      note("waiting for the running job (queue position " + std::to_string(position) + ")");
    });
    queued_->Decrement();
    if (st.ok()) {
      held_ = true;
      running_->Set(1);
    }
    return st;
  }
  ~JobSlot() {
    if (held_) {
      running_->Set(0);
      gate_->Release();
    }
  }

 private:
  JobGate* gate_;
  prometheus::Gauge* running_;
  prometheus::Gauge* queued_;
  bool held_ = false;
};

}  // namespace

Status ClusterdService::RunCluster(const v1::ClusterRequest& request,
                                   const std::function<bool()>& should_stop,
                                   const std::function<void(const v1::ClusterProgress&)>& emit,
                                   v1::ClusterResult* result, const ActingFor& acting_for) {
  auto t0 = std::chrono::steady_clock::now();
  auto note = [&](const std::string& text) {
    v1::ClusterProgress p;
    p.set_note(text);
    emit(p);
  };
  // Request checks that need no data.
  MLCD_RETURN_IF_ERROR(CheckFeatureSource(request.features()));
  if (request.centroids_out().empty())
    return Status::InvalidArgument(
        "centroids_out is required: the .npy path to write the k x d centroids to");
  MLCD_ASSIGN_OR_RETURN(const SphericalKMeansParams params, KMeansParamsFrom(request));
  MLCD_ASSIGN_OR_RETURN(const std::string out_path,
                        Resolve(request.centroids_out(), "centroids_out"));
  if (IsDirectory(out_path))
    return Status::InvalidArgument(out_path + ": centroids_out is a directory; give a file path");
  MLCD_RETURN_IF_ERROR(options_.output_areas.CheckWrite(out_path, "centroids_out", acting_for));
  const PathResolver resolve = Resolver();
  MLCD_RETURN_IF_ERROR(
      CheckFeatureOutputs(request.features(), resolve, options_.output_areas, acting_for));

  JobSlot slot(&gate_, &metrics_->jobs_running, &metrics_->jobs_queued);
  MLCD_RETURN_IF_ERROR(slot.Acquire(should_stop, note));
  MLCD_LOG(INFO) << "Cluster "
                 << (request.request_id().empty() ? "" : "[" + request.request_id() + "] ")
                 << "k=" << params.k << " niter=" << params.niter << " -> " << out_path;

  MLCD_ASSIGN_OR_RETURN(FeatureInputs inputs, PrepareFeatures(request.features(), resolve, note));
  note("opening feature shards");
  MLCD_ASSIGN_OR_RETURN(FeatureShards shards, OpenShards(inputs, options_.data_roots));
  note("features: " + shards.Describe() + "; checking values");
  MLCD_RETURN_IF_ERROR(shards.CheckFinite(should_stop));
  MLCD_RETURN_IF_ERROR(ValidateKMeansParams(params, shards.rows()));
  const double scan_seconds = SecondsSince(t0);

  metrics_->target_iterations.Set(params.niter);
  KMeansCallbacks callbacks;
  callbacks.should_stop = should_stop;
  callbacks.on_note = note;
  double last_seconds = 0;
  int64_t train_rows = std::min<int64_t>(
      shards.rows(), static_cast<int64_t>(params.k) * params.max_points_per_centroid);
  callbacks.on_iteration = [&](const KMeansIterationStats& s) {
    metrics_->iterations.Increment();
    metrics_->iteration_seconds.Observe(s.seconds - last_seconds);
    last_seconds = s.seconds;
    metrics_->objective.Set(s.objective);
    metrics_->mean_similarity.Set(s.objective / static_cast<double>(train_rows));
    metrics_->imbalance.Set(s.imbalance_factor);
    metrics_->iteration.Set(s.iteration);
    v1::ClusterProgress p;
    auto* it = p.mutable_iteration();
    it->set_iteration(s.iteration);
    it->set_objective(s.objective);
    it->set_imbalance_factor(s.imbalance_factor);
    it->set_seconds(s.seconds);
    emit(p);
  };
  MLCD_ASSIGN_OR_RETURN(KMeansResult km, TrainSphericalKMeans(shards, params, callbacks));
  metrics_->rows_read.Increment(static_cast<double>(km.num_train_points));

  // Sizes over all rows: the top-1 pass (skipped when the caller assigns next: Assign reports
  // the same summary).
  AssignStats sizes;
  if (request.skip_size_pass()) {
    note("size pass skipped (skip_size_pass): the following Assign reports the cluster sizes");
  } else {
    note("assigning all " + std::to_string(shards.rows()) +
         " rows to their nearest centroid for the size summary");
    AssignParams ap;
    ap.l = 1;
    ap.threads = params.threads;
    AssignCallbacks acb;
    acb.should_stop = should_stop;
    acb.on_note = note;
    auto t_sizes = std::chrono::steady_clock::now();
    acb.on_progress = [&](int64_t done, int64_t total) {
      metrics_->assign_rate.Set(done / std::max(1e-9, SecondsSince(t_sizes)));
    };
    MLCD_ASSIGN_OR_RETURN(sizes, AssignTopL(shards, km.centroids, params.k, ap, acb, nullptr));
    metrics_->assign_rows.Increment(static_cast<double>(sizes.rows));
  }

  if (should_stop && should_stop())
    return Status::Cancelled("Cluster cancelled before writing the centroids");
  MLCD_RETURN_IF_ERROR(
      WriteCentroids(out_path, km.centroids, params.k, shards.d(), options_.data_roots));

  result->set_centroids_path(out_path);
  result->set_k(params.k);
  result->set_d(shards.d());
  result->set_num_points(static_cast<uint64_t>(shards.rows()));
  result->set_num_train_points(static_cast<uint64_t>(km.num_train_points));
  result->set_final_objective(km.iterations.empty() ? 0 : km.iterations.back().objective);
  if (!request.skip_size_pass())
    FillSizes(SummarizeClusterSizes(sizes.top1_sizes), result->mutable_sizes());
  result->set_read_seconds(scan_seconds + km.read_seconds);
  result->set_train_seconds(km.train_seconds);
  result->set_sizes_seconds(sizes.seconds);
  result->set_iterations(static_cast<int32_t>(km.iterations.size()));
  result->set_seconds(SecondsSince(t0));
  MLCD_LOG(INFO) << "Cluster done: " << out_path << " k=" << params.k << " d=" << shards.d()
                 << " in " << Fixed(result->seconds(), 2) << " s"
                 << (request.skip_size_pass()
                         ? std::string(" (size pass skipped)")
                         : " (empty clusters " + std::to_string(result->sizes().empty_clusters()) +
                               ", imbalance " + Fixed(result->sizes().imbalance_factor(), 3) + ")");
  v1::ClusterProgress p;
  *p.mutable_result() = *result;
  emit(p);
  return Status::Ok();
}

std::function<void(int64_t, int64_t)> ClusterdService::AssignProgressReporter(
    const std::function<void(const v1::AssignProgress&)>& emit,
    std::chrono::steady_clock::time_point t0) {
  struct State {
    std::chrono::steady_clock::time_point t_pass;
    std::chrono::steady_clock::time_point last_progress;
    int64_t rows_counted = 0;
  };
  auto state = std::make_shared<State>();
  state->t_pass = std::chrono::steady_clock::now();
  state->last_progress = state->t_pass - options_.progress_interval;
  return [this, state, emit, t0](int64_t done, int64_t total) {
    metrics_->assign_rows.Increment(static_cast<double>(done - state->rows_counted));
    state->rows_counted = done;
    double seconds = SecondsSince(state->t_pass);
    metrics_->assign_rate.Set(done / std::max(1e-9, seconds));
    auto now = std::chrono::steady_clock::now();
    if (now - state->last_progress < options_.progress_interval && done < total) return;
    state->last_progress = now;
    v1::AssignProgress p;
    p.mutable_status()->set_rows_done(static_cast<uint64_t>(done));
    p.mutable_status()->set_rows_total(static_cast<uint64_t>(total));
    p.mutable_status()->set_seconds(SecondsSince(t0));
    emit(p);
  };
}

Status ClusterdService::RunAssign(const v1::AssignRequest& request,
                                  const std::function<bool()>& should_stop,
                                  const std::function<void(const v1::AssignProgress&)>& emit,
                                  v1::AssignResult* result, const ActingFor& acting_for) {
  auto t0 = std::chrono::steady_clock::now();
  auto note = [&](const std::string& text) {
    v1::AssignProgress p;
    p.set_note(text);
    emit(p);
  };
  const std::string& labelstore_address = options_.labelstore_address;
  MLCD_RETURN_IF_ERROR(CheckAssignRequest(request, labelstore_address));
  MLCD_ASSIGN_OR_RETURN(AssignParams params, AssignParamsFrom(request));
  MLCD_RETURN_IF_ERROR(ValidateAssignParams(params));  // k is known once the centroids are read
  const PathResolver resolve = Resolver();
  MLCD_RETURN_IF_ERROR(
      CheckFeatureOutputs(request.features(), resolve, options_.output_areas, acting_for));

  JobSlot slot(&gate_, &metrics_->jobs_running, &metrics_->jobs_queued);
  MLCD_RETURN_IF_ERROR(slot.Acquire(should_stop, note));
  MLCD_LOG(INFO) << "Assign "
                 << (request.request_id().empty() ? "" : "[" + request.request_id() + "] ")
                 << "l=" << params.l << " method=" << SearchMethodName(params.method) << " -> "
                 << request.label_set() << " at " << labelstore_address;

  MLCD_ASSIGN_OR_RETURN(FeatureInputs inputs, PrepareFeatures(request.features(), resolve, note));
  note("opening feature shards");
  MLCD_ASSIGN_OR_RETURN(FeatureShards shards, OpenShards(inputs, options_.data_roots));
  note("features: " + shards.Describe() + "; checking values");
  MLCD_RETURN_IF_ERROR(shards.CheckFinite(should_stop));
  int k = 0, d = 0;
  MLCD_ASSIGN_OR_RETURN(const std::string centroids_path,
                        Resolve(request.centroids_path(), "centroids_path"));
  MLCD_ASSIGN_OR_RETURN(std::vector<float> centroids,
                        LoadCentroids(centroids_path, shards.d(), &k, &d));
  MLCD_RETURN_IF_ERROR(ValidateAssignParams(params, k));
  std::unique_ptr<LabelQualityAccumulator> quality;
  std::string class_labels_path;
  if (!request.class_labels_path().empty()) {
    MLCD_ASSIGN_OR_RETURN(class_labels_path,
                          Resolve(request.class_labels_path(), "class_labels_path"));
    MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> classes,
                          ReadClassLabels(class_labels_path, shards.rows()));
    quality = std::make_unique<LabelQualityAccumulator>(std::move(classes), k, params.l);
  }

  // The label set.
  // Every label-store call acts for the caller: clusterd never lends its own rights.
  labelstore::LabelStoreClientOptions store_options;
  store_options.acting_for = acting_for;
  labelstore::LabelStoreClient store(labelstore_address, store_options);
  MLCD_RETURN_IF_ERROR(store.WaitUntilReachable(options_.labelstore_connect_timeout));
  const labelstore::LabelSetSpec spec =
      LabelSetSpecFor(request, params, k, centroids_path, inputs.paths);
  MLCD_RETURN_IF_ERROR(CreateLabelSet(&store, spec, request.replace_existing(), note));
  // From here on a failure deletes the set again.
  bool keep = false;
  UnfinishedLabelSet cleanup{&store, &spec.name, &keep};

  std::unique_ptr<labelstore::LabelWriter> writer = store.OpenWriter(spec.name);
  LabelBatchSink sink = [&](int64_t first_row, LabelBatch batch) -> Status {
    const size_t rows = batch.num_rows();
    if (quality) quality->Add(first_row, static_cast<int64_t>(rows), batch.labels.data());
    return writer->WriteRows(batch.sample_ids.data(), rows, batch.labels_per_sample,
                             batch.labels.data(), batch.scores.data());
  };
  AssignCallbacks callbacks;
  callbacks.should_stop = should_stop;
  callbacks.on_note = note;
  callbacks.on_progress = AssignProgressReporter(emit, t0);
  note("assigning " + std::to_string(shards.rows()) + " rows to their top-" +
       std::to_string(params.l) + " of " + std::to_string(k) + " centroids (" +
       SearchMethodName(params.method) + ")");
  MLCD_ASSIGN_OR_RETURN(AssignStats stats,
                        AssignTopL(shards, centroids, k, params, callbacks, sink));
  MLCD_ASSIGN_OR_RETURN(v1::WriteLabelsResponse written, writer->Finish());
  if (should_stop && should_stop())
    return Status::Cancelled("Assign cancelled before sealing the label set");
  // Everything that can still fail runs before the set is sealed and kept: a failed call leaves
  // no label set behind, so a retry does not meet ALREADY_EXISTS.
  std::optional<LabelQuality> label_quality;
  if (quality) {
    StatusOr<LabelQuality> q = quality->Finish();
    if (!q.ok()) return q.status().WithContext(class_labels_path);
    label_quality = *q;
  }
  MLCD_ASSIGN_OR_RETURN(v1::LabelSetInfo sealed, store.Seal(spec.name, /*require_open=*/true));
  if (sealed.num_samples() != static_cast<uint64_t>(shards.rows())) {
    return Status::DataLoss("label set " + spec.name + " holds " +
                            std::to_string(sealed.num_samples()) +
                            " samples after sealing, expected " + std::to_string(shards.rows()));
  }
  keep = true;

  FillAssignResult(request, spec.name, shards.rows(), k, params.l, stats, sealed, label_quality,
                   result);
  if (params.method != SearchMethod::kExact) metrics_->approx_recall.Set(stats.approx_recall);
  if (label_quality) {
    const LabelQuality& q = *label_quality;
    metrics_->top1_recall.Set(q.top1_recall);
    metrics_->topl_recall.Set(q.topl_recall);
    metrics_->nmi.Set(q.nmi);
    note("label quality (A.8): true class recalled by top-1 " + Fixed(100 * q.top1_recall, 1) +
         "%, by top-" + std::to_string(params.l) + " " + Fixed(100 * q.topl_recall, 1) + "%; NMI " +
         Fixed(q.nmi, 4));
  }
  result->set_seconds(SecondsSince(t0));
  MLCD_LOG(INFO) << "Assign done: " << spec.name << " " << shards.rows() << " rows, k=" << k
                 << " l=" << params.l << " in " << Fixed(result->seconds(), 2) << " s (search "
                 << Fixed(stats.search_seconds, 2) << " s, " << written.rows_written()
                 << " rows written)";
  v1::AssignProgress p;
  *p.mutable_result() = *result;
  emit(p);
  return Status::Ok();
}

namespace {

// One server-streaming call: `run` gets should_stop (the client cancelled, disconnected or
// stopped reading) and emit (writes one progress message). Progress is written from the job
// thread only (Assign's label-store sink runs elsewhere but does not emit), so Write needs no
// lock.
template <typename Progress, typename Run>
grpc::Status ServeStream(RpcMetrics* rpc_metrics, const char* method, grpc::ServerContext* context,
                         grpc::ServerWriter<Progress>* writer, const Run& run) {
  Principal caller;
  grpc::Status auth = AuthorizeCall(*context, std::string("/mlcd.v1.Clusterd/") + method, &caller);
  if (!auth.ok()) return auth;
  StatusOr<Principal> acting = ActingPrincipal(*context, caller);
  if (!acting.ok()) return ToGrpcStatus(acting.status());
  const ActingFor acting_for = ActingForPrincipal(*acting);
  RpcTimer timer(rpc_metrics, method);
  std::atomic<bool> gone{false};
  const std::function<bool()> should_stop = [&] { return gone.load() || context->IsCancelled(); };
  const std::function<void(const Progress&)> emit = [&](const Progress& p) {
    if (!gone.load() && !writer->Write(p)) gone.store(true);
  };
  Status st;
  // Nothing a request holds may take the daemon down: an exception fails this call only
  // (the job slot and every scope unwind with it).
  try {
    st = run(should_stop, emit, acting_for);
  } catch (const std::exception& e) {
    st = Status::Internal(std::string(method) + " failed unexpectedly: " + e.what());
  } catch (...) {
    st = Status::Internal(std::string(method) + " failed unexpectedly (unknown exception)");
  }
  if (!st.ok() && should_stop() && st.code() != StatusCode::kCancelled) {
    st = Status::Cancelled(std::string(method) + " cancelled by the client (" + st.message() + ")");
  }
  if (!st.ok()) {
    MLCD_LOG(WARNING) << method << " failed: " << st.ToString();
  }
  return ToGrpcStatus(timer.Done(st));
}

}  // namespace

grpc::Status ClusterdService::Cluster(grpc::ServerContext* context,
                                      const v1::ClusterRequest* request,
                                      grpc::ServerWriter<v1::ClusterProgress>* writer) {
  return ServeStream(&rpc_metrics_, "Cluster", context, writer,
                     [&](const auto& should_stop, const auto& emit, const ActingFor& acting) {
                       v1::ClusterResult result;
                       return RunCluster(*request, should_stop, emit, &result, acting);
                     });
}

grpc::Status ClusterdService::Assign(grpc::ServerContext* context, const v1::AssignRequest* request,
                                     grpc::ServerWriter<v1::AssignProgress>* writer) {
  return ServeStream(&rpc_metrics_, "Assign", context, writer,
                     [&](const auto& should_stop, const auto& emit, const ActingFor& acting) {
                       v1::AssignResult result;
                       return RunAssign(*request, should_stop, emit, &result, acting);
                     });
}

}  // namespace mlcd::clusterd
