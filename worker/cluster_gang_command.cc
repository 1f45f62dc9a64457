// `mlcd-worker cluster-gang`: spherical k-means and top-l assignment of feature shards on a
// gang of ranks (worker/cluster/, docs/clusterd.md "The gang engine").
//
//   mlcd-worker cluster-gang --features A.npy --features B.npy --k K --out DIR
//       [--niter N] [--seed S] [--l L] [--max-points-per-centroid M] [--workspace-mb MB]
//       [--checkpoint FILE] [--checkpoint-every N] [--trace] [--threads T]
//       [--world-size W] [--timeout SECONDS] [--device auto|cpu|cuda[:N]] [--bf16]
//   mlcd-worker cluster-gang --assignment FILE [--progress-jsonl FILE] [--data-root DIR ...]
//       [--device auto|cpu|cuda[:N]] [--threads T]
//
// With --assignment (a CLUSTER or ASSIGN_LABELS assignment of clustering.engine "gang", as the
// worker agent runs it) the rank is one process of the job's gang: worker/cluster/gang_phase.h.
// Its "finished" event carries the ClusterResult ("cluster") or AssignResult ("assign").
//
// Rank r of W reads global rows [n*r/W, n*(r+1)/W) of the shards (in order). --world-size
// W > 1 forks W local ranks on a free loopback port, over Gloo (NCCL on CUDA devices, one
// per rank). Outputs: rank 0 writes DIR/centroids.npy (k x d float32) and DIR/stats.json (per-iteration objective, imbalance,
// splits); every rank writes DIR/labels.r<rank>.npy (its rows x l int32, best first) and
// DIR/sample.r<rank>.npy (the global ids of its training-sample rows, int64); with --trace
// rank 0 also writes DIR/trace/iter<i>.npy, the centroids after iteration i.
// Exit codes: 0 success, 2 invalid input or usage, 1 any other failure; a rank started by
// hand (--rank) exits 3 when another process holds its rendezvous port (the parent, which
// chose the port, starts its ranks again on another one).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/blas_env.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/npy.h"
#include "worker/agent/assignment_paths.h"
#include "worker/cluster/feature_rows.h"
#include "worker/cluster/gang_assign.h"
#include "worker/cluster/gang_kmeans.h"
#include "worker/cluster/gang_layout.h"
#include "worker/cluster/gang_phase.h"
#include "worker/cluster/rank_memory.h"
#include "worker/command.h"
#include "worker/command_io.h"
#include "worker/dist/collectives.h"
#include "worker/dist/local_ranks.h"
#include "worker/train/train_step.h"

namespace mlcd::worker {
namespace {

struct ClusterGangArgs {
  std::vector<std::string> features;
  std::string out, checkpoint;
  int k = 0, niter = 20, l = 8, max_points_per_centroid = 256, checkpoint_every = 5;
  uint64_t seed = 1234;
  int64_t workspace_mb = 512;
  bool trace = false;
  int threads = 1;
  int world_size = 1;
  double timeout_seconds = 120;
  int rank = -1;  // set by the parent for its child ranks only
  std::string rendezvous;
  // Assignment mode (the worker agent).
  std::string assignment, progress_jsonl, device = "auto", log_level = "info";
  WorkerRootFlags data_roots;
  bool threads_given = false;
  bool bf16 = false;
};

// One rank of a job's gang, from the agent's assignment file.
int RunAssignment(const ClusterGangArgs& a) {
  cli::JsonLines progress;
  if (!cli::ApplyLogLevelFlag(a.log_level)) return 2;
  Status st = progress.Open(a.progress_jsonl);
  if (!st.ok()) return progress.Fail(st);
  auto assignment = cli::ReadAssignment(a.assignment);
  if (!assignment.ok()) return progress.Fail(assignment.status().WithContext("--assignment"));
  st = ConfineAssignmentForChild(*assignment, a.data_roots);
  if (!st.ok()) return progress.Fail(st);
  SetLogComponent("cluster-gang r" + std::to_string(assignment->rank()));
  cluster::GangPhaseOptions o;
  o.device = a.device;
  o.threads = a.threads_given ? a.threads : assignment->spec().training().threads_per_worker();
  o.emit = [&progress](const nlohmann::json& event) { progress.Write(event); };
  auto result = cluster::RunGangPhase(*assignment, o);
  if (!result.ok()) return progress.Fail(result.status());
  nlohmann::json finished = {{"event", "finished"}};
  if (assignment->kind() == v1::ASSIGNMENT_KIND_CLUSTER) {
    if (assignment->rank() == 0) {
      finished["cluster"] = cli::MessageToJsonObject(result->cluster);
      finished["outputs"] = {result->cluster.centroids_path()};
    }
  } else {
    finished["assign"] = cli::MessageToJsonObject(result->assign);
  }
  progress.Write(finished);
  return 0;
}

Status WriteTensor(const std::string& path, const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).contiguous();
  const NpyDtype dtype = c.scalar_type() == at::kFloat ? NpyDtype::kFloat32
                         : c.scalar_type() == at::kInt ? NpyDtype::kInt32
                                                       : NpyDtype::kInt64;
  return WriteNpy(path, dtype, c.sizes().vec(), c.data_ptr());
}

std::string StatsJson(const cluster::GangKMeansResult& km, int world, int64_t d, int k) {
  std::string s =
      "{\"world_size\": " + std::to_string(world) + ", \"rows\": " + std::to_string(km.total_rows) +
      ", \"train_rows\": " + std::to_string(km.train_rows) + ", \"k\": " + std::to_string(k) +
      ", \"d\": " + std::to_string(d) + ", \"resumed_after\": " + std::to_string(km.resumed_after) +
      ", \"iterations\": [";
  for (size_t i = 0; i < km.iterations.size(); ++i) {
    const auto& it = km.iterations[i];
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"iteration\": %d, \"objective\": %.10g, \"imbalance_factor\": %.6g, "
                  "\"splits\": %d, \"seconds\": %.4f}",
                  i ? ", " : "", it.iteration, it.objective, it.imbalance_factor, it.splits,
                  it.seconds);
    s += buf;
  }
  return s + "]}\n";
}

Status RunRank(const ClusterGangArgs& a, const cluster::FeatureRows& features, int rank,
               int world) {
  at::set_num_threads(a.threads);
  SetBlasThreads(a.threads);  // OpenBLAS keeps its own pool (common/blas_env.h)
  const int64_t b = cluster::EvenSplitBegin(features.rows(), world, rank);
  const int64_t e = cluster::EvenSplitBegin(features.rows(), world, rank + 1);
  MLCD_ASSIGN_OR_RETURN(at::Device device, ResolveDevice(a.device, rank));
  cluster::RankMemoryPlan plan;
  plan.total_rows = features.rows();
  plan.world = world;
  plan.d = features.d();
  plan.k = a.k;
  plan.max_points_per_centroid = a.max_points_per_centroid;
  plan.search.workspace_bytes = a.workspace_mb << 20;
  plan.search.bf16 = a.bf16;
  MLCD_RETURN_IF_ERROR(cluster::CheckRankMemory(plan, device));
  // Gloo cannot move CUDA tensors: ranks on CUDA devices (cuda:rank with --device auto) meet
  // over NCCL.
  MLCD_ASSIGN_OR_RETURN(
      std::unique_ptr<Collectives> comm,
      ConnectLocalRank(rank, world, a.rendezvous, a.timeout_seconds, "cluster-gang", device));
  MLCD_ASSIGN_OR_RETURN(at::Tensor rows, features.Read(b, e, device));

  cluster::GangKMeansParams p;
  p.k = a.k;
  p.niter = a.niter;
  p.seed = a.seed;
  p.max_points_per_centroid = a.max_points_per_centroid;
  p.search = plan.search;
  p.checkpoint_path = a.checkpoint;
  p.checkpoint_every = a.checkpoint_every;
  cluster::GangKMeansCallbacks cb;
  const std::string trace_dir = a.out + "/trace";
  Status trace_status;
  if (a.trace && rank == 0) {
    MLCD_RETURN_IF_ERROR(MakeDirs(trace_dir));
    cb.on_iteration = [&](const cluster::GangKMeansIterationStats& s, const at::Tensor& c) {
      Status st = WriteTensor(trace_dir + "/iter" + std::to_string(s.iteration) + ".npy", c);
      if (trace_status.ok()) trace_status = st;
    };
  }
  MLCD_ASSIGN_OR_RETURN(cluster::GangKMeansResult km,
                        cluster::TrainGangKMeans(rows, b, p, *comm, cb));
  MLCD_RETURN_IF_ERROR(trace_status);

  cluster::GangAssignParams ap;
  ap.l = a.l;
  ap.search = p.search;
  at::Tensor labels = at::empty({e - b, a.l}, at::kInt);  // on the host: the sink's copies
  MLCD_ASSIGN_OR_RETURN(
      cluster::GangAssignStats as,
      cluster::AssignGangTopL(rows, b, km.centroids, ap, *comm,
                              [&](int64_t first, const labelstore::LabelBatch& batch) {
                                std::copy(batch.labels.begin(), batch.labels.end(),
                                          labels.data_ptr<int32_t>() + (first - b) * a.l);
                                return Status::Ok();
                              }));
  MLCD_RETURN_IF_ERROR(MakeDirs(a.out));
  const std::string r = std::to_string(rank);
  MLCD_RETURN_IF_ERROR(WriteTensor(a.out + "/labels.r" + r + ".npy", labels));
  MLCD_RETURN_IF_ERROR(WriteTensor(a.out + "/sample.r" + r + ".npy", km.local_sample_rows));
  if (rank != 0) return Status::Ok();
  MLCD_RETURN_IF_ERROR(WriteTensor(a.out + "/centroids.npy", km.centroids));
  MLCD_RETURN_IF_ERROR(
      WriteFileAtomically(a.out + "/stats.json", StatsJson(km, world, features.d(), a.k)));
  std::printf(
      "{\"rows\": %lld, \"k\": %d, \"iterations\": %zu, \"resumed_after\": %d, "
      "\"assign_seconds\": %.4f, \"empty_top1_clusters\": %lld}\n",
      static_cast<long long>(as.rows), a.k, km.iterations.size(), km.resumed_after, as.seconds,
      static_cast<long long>(std::count(as.top1_sizes.begin(), as.top1_sizes.end(), int64_t{0})));
  std::fflush(stdout);
  return Status::Ok();
}

std::vector<std::string> ChildArgs(const ClusterGangArgs& a, int rank, const std::string& rdv) {
  std::vector<std::string> v = {"mlcd-worker", "cluster-gang"};
  for (const std::string& f : a.features) v.insert(v.end(), {"--features", f});
  auto add = [&](const char* flag, const std::string& value) { v.insert(v.end(), {flag, value}); };
  add("--k", std::to_string(a.k));
  add("--niter", std::to_string(a.niter));
  add("--l", std::to_string(a.l));
  add("--seed", std::to_string(a.seed));
  add("--max-points-per-centroid", std::to_string(a.max_points_per_centroid));
  add("--workspace-mb", std::to_string(a.workspace_mb));
  add("--checkpoint-every", std::to_string(a.checkpoint_every));
  if (!a.checkpoint.empty()) add("--checkpoint", a.checkpoint);
  if (a.trace) v.push_back("--trace");
  add("--threads", std::to_string(a.threads));
  add("--device", a.device);
  if (a.bf16) v.push_back("--bf16");
  add("--out", a.out);
  add("--world-size", std::to_string(a.world_size));
  add("--timeout", std::to_string(a.timeout_seconds));
  add("--rank", std::to_string(rank));
  add("--rendezvous", rdv);
  return v;
}

int RunClusterGang(const ClusterGangArgs& a) {
  if (!a.assignment.empty()) return RunAssignment(a);
  if (a.features.empty() || a.k == 0 || a.out.empty()) {
    std::cerr << "cluster-gang: --features, --k and --out are required (or --assignment)\n";
    return 2;
  }
  const std::string who =
      "cluster-gang" + (a.rank >= 0 ? " rank " + std::to_string(a.rank) : std::string());
  SetLogComponent(a.rank >= 0 ? "cluster-gang r" + std::to_string(a.rank) : "cluster-gang");
  auto usage = [&](const std::string& m) {
    std::cerr << who << ": " << m << "\n";
    return 2;
  };
  if (a.world_size < 1 || a.world_size > 64)
    return usage("--world-size must be in [1, 64], got " + std::to_string(a.world_size));
  if (a.threads < 1 || a.threads > 256) return usage("--threads must be in [1, 256]");
  if (a.workspace_mb < 1 || a.workspace_mb > (int64_t{1} << 20))
    return usage("--workspace-mb must be in [1, 1048576]");
  if (!(a.timeout_seconds > 0)) return usage("--timeout must be positive");
  if (a.rank >= 0 && (a.rank >= a.world_size || a.rendezvous.empty()))
    return usage("--rank needs --rendezvous and must be < --world-size");
  auto features = cluster::FeatureRows::Open(a.features);
  if (!features.ok()) return usage(features.status().ToString());
  cluster::GangKMeansParams p;
  p.k = a.k;
  p.niter = a.niter;
  p.max_points_per_centroid = a.max_points_per_centroid;
  p.checkpoint_path = a.checkpoint;
  p.checkpoint_every = a.checkpoint_every;
  if (Status s = cluster::ValidateGangKMeansParams(p, features->rows()); !s.ok())
    return usage(s.ToString());
  if (a.l < 1 || a.l > a.k) return usage("--l must be in [1, k = " + std::to_string(a.k) + "]");
  if (a.world_size > 1 && a.rank < 0) {
    return RunLocalRanks("cluster-gang", a.world_size, [&a](int rank, const std::string& rdv) {
      return ChildArgs(a, rank, rdv);
    });
  }
  return FinishLocalRank(who, RunRank(a, *features, std::max(a.rank, 0), a.world_size));
}

static CommandRegistration registration(25, [](CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ClusterGangArgs>();
  CLI::App* cmd = app.add_subcommand(
      "cluster-gang",
      "Spherical k-means (clusterd's FAISS algorithm) and top-l assignment of feature shards on "
      "a gang of ranks over c10d. Writes DIR/centroids.npy, DIR/stats.json, "
      "DIR/labels.r<rank>.npy, DIR/sample.r<rank>.npy.");
  cmd->add_option("--features", args->features,
                  "feature shard (.npy, n x d float32/float16); repeat, in row order");
  cmd->add_option("--k", args->k, "number of centroids");
  cmd->add_option("--niter", args->niter, "k-means iterations")->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the sample and initialisation")
      ->capture_default_str();
  cmd->add_option("--l", args->l, "labels per row")->capture_default_str();
  cmd->add_option("--max-points-per-centroid", args->max_points_per_centroid,
                  "training sample = k * this rows at most")
      ->capture_default_str();
  cmd->add_option("--workspace-mb", args->workspace_mb, "score workspace per chunk, MiB")
      ->capture_default_str();
  cmd->add_option("--checkpoint", args->checkpoint,
                  "centroid checkpoint file; a run finding one of the same run resumes from it");
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "iterations between checkpoints")
      ->capture_default_str();
  cmd->add_flag("--trace", args->trace,
                "rank 0 writes DIR/trace/iter<i>.npy after every iteration");
  cmd->add_option("--threads", args->threads, "intra-op threads per rank")->capture_default_str();
  cmd->add_option("--out", args->out, "output directory (created)");
  cmd->add_option("--assignment", args->assignment,
                  "protobuf JSON of an mlcd.v1.Assignment (CLUSTER or ASSIGN_LABELS): run as one "
                  "rank of the job's gang; the other flags except --threads are not used");
  AddWorkerDataRootFlag(*cmd, &args->data_roots,
                        "none: paths are not confined (the agent passes its own roots)");
  cmd->add_option("--device", args->device,
                  "auto (a CUDA device when there is one), cpu, cuda, cuda:N")
      ->capture_default_str();
  cmd->add_flag("--bf16", args->bf16, "bfloat16 search GEMMs (CUDA only)");
  cli::AddProgressJsonlFlag(cmd, &args->progress_jsonl);
  cli::AddLogLevelFlag(cmd, &args->log_level);
  cmd->add_option("--world-size", args->world_size,
                  "local ranks (Gloo on loopback; NCCL on CUDA devices)")
      ->capture_default_str();
  AddLocalRankOptions(cmd, &args->timeout_seconds, &args->rank, &args->rendezvous);
  cmd->callback([args, cmd, exit_code] {
    args->threads_given = cmd->get_option("--threads")->count() > 0;
    *exit_code = RunClusterGang(*args);
  });
});

}  // namespace
}  // namespace mlcd::worker
