#include "worker/cluster/gang_phase.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>

#include "clients/labelstore_client.h"
#include "common/blas_env.h"
#include "common/enums.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/npy.h"
#include "common/spec_defaults.h"
#include "common/stopwatch.h"
#include "worker/cluster/feature_rows.h"
#include "worker/cluster/gang_assign.h"
#include "worker/cluster/gang_kmeans.h"
#include "worker/cluster/gang_layout.h"
#include "worker/cluster/gang_quality.h"
#include "worker/cluster/rank_memory.h"
#include "worker/dist/collectives.h"
#include "worker/train/train_step.h"

namespace mlcd::worker::cluster {
namespace {

using Clock = std::chrono::steady_clock;

struct RankContext {
  const v1::Assignment* a = nullptr;
  std::unique_ptr<Collectives> comm;
  at::Device device = at::kCPU;
  FeatureRows features;
  int64_t begin = 0, end = 0;
  at::Tensor rows;
  SearchOptions search;
  double read_seconds = 0;
};

StatusOr<RankContext> Prepare(const v1::Assignment& a, const GangPhaseOptions& o) {
  RankContext c;
  c.a = &a;
  const v1::ClusteringSpec& cl = a.spec().clustering();
  std::vector<std::string> paths(a.feature_paths().begin(), a.feature_paths().end());
  if (paths.empty() && !a.has_generated_features())
    return Status::InvalidArgument(
        "the assignment names no feature shards (feature_paths) nor generated_features");
  const auto t0 = Clock::now();
  // k against the rows: the coordinator's plan step (and ValidateGangKMeansParams).
  MLCD_ASSIGN_OR_RETURN(c.features, a.has_generated_features()
                                        ? FeatureRows::OpenGenerated(a.generated_features())
                                        : FeatureRows::Open(paths));
  MLCD_ASSIGN_OR_RETURN(c.device, ResolveDevice(o.device, a.rank()));
  MLCD_ASSIGN_OR_RETURN(const Precision precision, ParsePrecision(a.spec().training().precision()));
  c.search.bf16 = c.device.is_cuda() && UsesBf16(precision);
  const int world = std::max(1, a.world_size());
  RankMemoryPlan plan;
  plan.total_rows = c.features.rows();
  plan.world = world;
  plan.d = c.features.d();
  plan.k = cl.k();
  plan.max_points_per_centroid = cl.max_points_per_centroid();
  plan.search = c.search;
  MLCD_RETURN_IF_ERROR(CheckRankMemory(plan, c.device));
  CollectivesOptions co;
  co.rank = a.rank();
  co.world_size = world;
  co.rendezvous = a.rendezvous_address();
  co.timeout =
      std::chrono::seconds(std::max(120, a.spec().training().collective_timeout_seconds()));
  co.device = c.device;
  co.store_prefix = "mlcd-cluster";
  MLCD_ASSIGN_OR_RETURN(c.comm, Collectives::Create(co));
  c.begin = EvenSplitBegin(c.features.rows(), world, a.rank());
  c.end = EvenSplitBegin(c.features.rows(), world, a.rank() + 1);
  MLCD_ASSIGN_OR_RETURN(c.rows, c.features.Read(c.begin, c.end, c.device));
  c.read_seconds = SecondsSince(t0);
  return c;
}

StatusOr<GangPhaseResult> RunCluster(RankContext& c, const GangPhaseOptions& o) {
  const v1::Assignment& a = *c.a;
  const v1::ClusteringSpec& cl = a.spec().clustering();
  if (a.centroids_path().empty())
    return Status::InvalidArgument("the CLUSTER assignment names no centroids_path");
  GangKMeansParams p;
  p.k = cl.k();
  p.niter = cl.niter();
  p.seed = ClusteringRoundSeed(cl, a.round());
  p.max_points_per_centroid = cl.max_points_per_centroid();
  p.search = c.search;
  p.checkpoint_path = a.centroids_path() + ".ckpt";
  p.checkpoint_every = kGangCheckpointEvery;
  MLCD_RETURN_IF_ERROR(ValidateGangKMeansParams(p, c.features.rows()));
  GangKMeansCallbacks cb;
  cb.on_iteration = [&](const GangKMeansIterationStats& s, const at::Tensor&) {
    if (o.emit)
      o.emit({{"event", "progress"},
              {"phase", "k-means"},
              {"round", a.round()},
              {"rows_done", s.iteration + 1},
              {"rows_total", p.niter},
              {"objective", s.objective}});
  };
  const auto t0 = Clock::now();
  MLCD_ASSIGN_OR_RETURN(GangKMeansResult km, TrainGangKMeans(c.rows, c.begin, p, *c.comm, cb));
  GangPhaseResult out;
  v1::ClusterResult& r = out.cluster;
  r.set_centroids_path(a.centroids_path());
  r.set_k(p.k);
  r.set_d(static_cast<int32_t>(c.features.d()));
  r.set_num_points(static_cast<uint64_t>(km.total_rows));
  r.set_num_train_points(static_cast<uint64_t>(km.train_rows));
  if (!km.iterations.empty()) r.set_final_objective(km.iterations.back().objective);
  r.set_read_seconds(c.read_seconds);
  r.set_train_seconds(SecondsSince(t0));
  r.set_seconds(c.read_seconds + r.train_seconds());
  r.set_iterations(p.niter);
  if (a.rank() == 0) {
    at::Tensor cpu = km.centroids.to(at::kCPU).contiguous();
    const std::string header = EncodeNpyHeader(NpyDtype::kFloat32, {p.k, c.features.d()});
    MLCD_RETURN_IF_ERROR(WriteFileAtomically(
        a.centroids_path(), {ConstBuffer{header.data(), header.size()},
                             ConstBuffer{cpu.data_ptr(), static_cast<size_t>(cpu.nbytes())}}));
  }
  return out;
}

// This rank's sample ids: the global rows, or its range of the concatenated id files (each
// file mapped, only the rank's part read: at 400M rows a whole file is 3.2 GB).
StatusOr<std::vector<uint64_t>> SampleIds(const RankContext& c) {
  std::vector<uint64_t> ids(static_cast<size_t>(c.end - c.begin));
  if (c.a->feature_ids_paths().empty()) {
    for (int64_t i = c.begin; i < c.end; ++i) ids[i - c.begin] = static_cast<uint64_t>(i);
    return ids;
  }
  int64_t at = 0;  // global row of the file's first id
  for (const std::string& path : c.a->feature_ids_paths()) {
    MLCD_ASSIGN_OR_RETURN(MappedNpy map, MappedNpy::Open(path));
    const int64_t n = map.header().num_elements();
    // The rank's part of this file; empty when it has none (the file is still checked).
    const int64_t b = std::clamp(c.begin - at, int64_t{0}, n);
    const int64_t e = std::clamp(c.end - at, b, n);
    MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> part, ReadNpyRangeAsInt64(map, b, e));
    for (size_t i = 0; i < part.size(); ++i)
      ids[static_cast<size_t>(at + b - c.begin) + i] = static_cast<uint64_t>(part[i]);
    at += n;
  }
  if (at != c.features.rows()) {
    return Status::InvalidArgument("the sample-id files hold " + std::to_string(at) + " ids for " +
                                   std::to_string(c.features.rows()) + " feature rows");
  }
  return ids;
}

// This rank's true classes (generated features: the dataset's labels; else its range of the
// mapped class file), or empty when the
// assignment names none.
StatusOr<std::vector<int64_t>> RankClasses(const RankContext& c) {
  if (c.a->has_generated_features()) return c.features.Classes(c.begin, c.end);
  if (c.a->class_labels_path().empty()) return std::vector<int64_t>();
  MLCD_ASSIGN_OR_RETURN(MappedNpy map, MappedNpy::Open(c.a->class_labels_path()));
  if (map.header().num_elements() != c.features.rows()) {
    return Status::InvalidArgument(c.a->class_labels_path() + " holds " +
                                   std::to_string(map.header().num_elements()) + " classes for " +
                                   std::to_string(c.features.rows()) + " feature rows");
  }
  return ReadNpyRangeAsInt64(map, c.begin, c.end);
}

StatusOr<GangPhaseResult> RunAssignLabels(RankContext& c, const GangPhaseOptions& o) {
  const v1::Assignment& a = *c.a;
  const v1::ClusteringSpec& cl = a.spec().clustering();
  if (a.label_set().empty() || a.centroids_path().empty())
    return Status::InvalidArgument("the ASSIGN_LABELS assignment names no label_set or centroids");
  MLCD_ASSIGN_OR_RETURN(NpyArray centroids, ReadNpy(a.centroids_path()));
  if (centroids.header.dtype != NpyDtype::kFloat32 || centroids.header.shape.size() != 2 ||
      centroids.header.shape[0] != cl.k() || centroids.header.shape[1] != c.features.d()) {
    return Status::InvalidArgument(a.centroids_path() + " is not float32 k x d = " +
                                   std::to_string(cl.k()) + " x " + std::to_string(c.features.d()));
  }
  at::Tensor cents =
      at::from_blob(centroids.mutable_data_as<float>(), {cl.k(), c.features.d()}, at::kFloat)
          .to(c.device, /*non_blocking=*/false, /*copy=*/true);
  MLCD_ASSIGN_OR_RETURN(std::vector<uint64_t> ids, SampleIds(c));
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> classes, RankClasses(c));
  const int l = cl.l();
  std::vector<int32_t> kept;  // rows x l, for the quality report
  if (!classes.empty()) kept.resize(ids.size() * static_cast<size_t>(l));

  // The rank writes by the capability of its assignment, bound to this set, job, round and
  // rank (clients/write_capability.h); its own identity grants no write to a job's set. The
  // coordinator created the set and seals it.
  labelstore::LabelStoreClientOptions lo;
  lo.write_capability = a.label_write_capability();
  lo.timeout = std::chrono::seconds(std::max(30, a.spec().training().collective_timeout_seconds()));
  labelstore::LabelStoreClient client(a.labelstore_address(), lo);
  const auto t0 = Clock::now();
  std::unique_ptr<labelstore::LabelWriter> writer = client.OpenWriter(a.label_set());
  GangAssignParams ap;
  ap.l = l;
  ap.search = c.search;
  auto last = Clock::now();
  MLCD_ASSIGN_OR_RETURN(
      GangAssignStats stats,
      AssignGangTopL(c.rows, c.begin, cents, ap, *c.comm,
                     [&](int64_t first, const labelstore::LabelBatch& batch) -> Status {
                       const size_t n = batch.sample_ids.size();
                       const size_t off = static_cast<size_t>(first - c.begin);
                       if (!kept.empty())
                         std::copy(batch.labels.begin(), batch.labels.end(),
                                   kept.begin() + off * l);
                       MLCD_RETURN_IF_ERROR(writer->WriteRows(
                           ids.data() + off, n, l, batch.labels.data(), batch.scores.data()));
                       if (o.emit && Clock::now() - last >= std::chrono::seconds(1)) {
                         last = Clock::now();
                         o.emit({{"event", "progress"},
                                 {"phase", "top-l labels"},
                                 {"round", a.round()},
                                 {"rows_done", static_cast<int64_t>(off + n)},
                                 {"rows_total", c.end - c.begin}});
                       }
                       return Status::Ok();
                     }));
  MLCD_RETURN_IF_ERROR(writer->Finish().status().WithContext("writing " + a.label_set()));
  GangPhaseResult out;
  v1::AssignResult& r = out.assign;
  r.set_label_set(a.label_set());
  r.set_num_samples(static_cast<uint64_t>(stats.rows));
  r.set_l(l);
  r.set_k(cl.k());
  r.set_approx_recall(1);
  r.set_method(v1::SEARCH_METHOD_EXACT);
  *r.mutable_sizes() = SummarizeSizes(stats.top1_sizes);
  r.set_search_seconds(stats.seconds);
  // Every rank's quality numbers come from the same reduced tables.
  int64_t local_has = classes.empty() ? 0 : 1;
  at::Tensor has = at::full({1}, local_has, at::kLong);
  MLCD_RETURN_IF_ERROR(c.comm->AllReduce(has, ReduceOp::kMin));
  if (has.item<int64_t>() == 1) {
    StatusOr<v1::LabelQuality> q = GangLabelQuality(classes, kept, cl.k(), l, *c.comm);
    if (q.ok()) {
      *r.mutable_quality() = *q;
    } else if (q.status().code() == StatusCode::kResourceExhausted) {
      MLCD_LOG(WARNING) << q.status().ToString();
    } else {
      return q.status();
    }
  }
  r.set_seconds(c.read_seconds + SecondsSince(t0));
  return out;
}

}  // namespace

StatusOr<GangPhaseResult> RunGangPhase(const v1::Assignment& assignment,
                                       const GangPhaseOptions& options) {
  if (options.threads > 0) {
    at::set_num_threads(options.threads);
    SetBlasThreads(options.threads);  // OpenBLAS keeps its own pool
  }
  if (assignment.kind() != v1::ASSIGNMENT_KIND_CLUSTER &&
      assignment.kind() != v1::ASSIGNMENT_KIND_ASSIGN_LABELS) {
    return Status::InvalidArgument("cluster-gang runs CLUSTER and ASSIGN_LABELS assignments, not " +
                                   v1::AssignmentKind_Name(assignment.kind()));
  }
  MLCD_ASSIGN_OR_RETURN(RankContext c, Prepare(assignment, options));
  if (options.emit)
    options.emit({{"event", "started"},
                  {"rank", assignment.rank()},
                  {"world_size", assignment.world_size()},
                  {"rows_total", c.end - c.begin}});
  if (assignment.kind() == v1::ASSIGNMENT_KIND_CLUSTER) return RunCluster(c, options);
  return RunAssignLabels(c, options);
}

}  // namespace mlcd::worker::cluster
