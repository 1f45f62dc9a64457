// mlcdctl cluster / mlcdctl assign: drive mlcd-clusterd.
//
//   mlcdctl cluster --features feats/ --k 1000 --out centroids.npy
//   mlcdctl assign --features feats/ --centroids centroids.npy --l 8 --label-set demo/r0
//   mlcdctl --labelstore ADDR assign ...   (the daemon writes to ADDR instead of its own store)
//
// Relative paths are made absolute against the current directory before they are sent (the
// daemon must see the same filesystem); --remote-paths sends them unchanged, to be resolved
// against the daemon's --data-dir. Progress is a bar on a terminal and plain lines otherwise;
// --output json prints only the final result as JSON. Ctrl-C cancels the job on the server.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "client/cli.h"
#include "clients/clusterd_client.h"
#include "mlcd/v1/clusterd.pb.h"

namespace mlcd::cli {
namespace {

// One streaming call to mlcd-clusterd from the CLI: Ctrl-C cancels it on the server, and in
// text output a progress display named `what` shows its progress.
class ClusterdCall {
 public:
  ClusterdCall(const Context& ctx, const char* what)
      : ctx_(ctx),
        client_(ctx.clusterd),
        cancel_on_interrupt_(&interrupt_, [this] { control_.Cancel(); }) {
    if (text()) display_ = std::make_unique<ProgressDisplay>(what);
  }

  clusterd::ClusterdClient& client() { return client_; }
  clusterd::CallControl* control() { return &control_; }
  bool text() const { return ctx_.format() == OutputFormat::kText; }
  // Null in JSON output.
  ProgressDisplay* display() { return display_.get(); }

  // Ends a failed call: after Ctrl-C, says what the interrupt did (`on_interrupt`) instead of
  // the bare CANCELLED status; otherwise the call's own error.
  int Fail(const Status& status, const std::string& on_interrupt) {
    const bool interrupted = interrupt_.interrupted();
    if (display_) display_->Finish(interrupted ? "cancelled" : "failed");
    return ctx_.Fail(interrupted ? Status::Cancelled("interrupted: " + on_interrupt) : status);
  }

 private:
  const Context& ctx_;
  clusterd::ClusterdClient client_;
  clusterd::CallControl control_;
  InterruptGuard interrupt_;
  InterruptGuard::Cancel cancel_on_interrupt_;
  std::unique_ptr<ProgressDisplay> display_;
};

std::string Absolute(const std::string& path, bool remote) {
  if (remote || path.empty() || path[0] == '/') return path;
  char buf[4096];
  if (!::getcwd(buf, sizeof(buf))) return path;
  std::string cwd = buf;
  std::string p = path;
  while (p.rfind("./", 0) == 0) p = p.substr(2);
  return cwd + "/" + p;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

std::string Fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c);
  return buf;
}

struct FeatureFlags {
  std::vector<std::string> paths;
  std::vector<std::string> ids;
  bool remote_paths = false;
  int threads = 0;
  std::string request_id;
};

void AddFeatureFlags(CLI::App* cmd, FeatureFlags* f) {
  cmd->add_option("--features", f->paths,
                  ".npy feature shards (float32/float16, n x d) or directories of them")
      ->required();
  cmd->add_option("--ids", f->ids,
                  "optional sample-id .npy files, one per shard in order (default: row index)");
  cmd->add_flag("--remote-paths", f->remote_paths,
                "send paths unchanged (resolved on the daemon, relative to its --data-dir)");
  cmd->add_option("--threads", f->threads, "threads on the daemon (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--request-id", f->request_id, "id shown in the daemon's logs");
}

void FillFeatures(const FeatureFlags& f, v1::FeatureSource* out) {
  for (const auto& p : f.paths) out->add_paths(Absolute(p, f.remote_paths));
  for (const auto& p : f.ids) out->add_ids_paths(Absolute(p, f.remote_paths));
}

struct ClusterFlags {
  FeatureFlags features;
  int k = 0;
  int niter = 20;
  uint64_t seed = 1234;
  int max_points_per_centroid = 256;
  std::string out;
  bool skip_size_pass = false;
};

int RunCluster(const Context& ctx, const ClusterFlags& f) {
  v1::ClusterRequest req;
  FillFeatures(f.features, req.mutable_features());
  req.set_k(f.k);
  req.set_niter(f.niter);
  req.set_seed(f.seed);
  req.set_max_points_per_centroid(f.max_points_per_centroid);
  req.set_threads(f.features.threads);
  req.set_centroids_out(Absolute(f.out, f.features.remote_paths));
  req.set_request_id(f.features.request_id);
  req.set_skip_size_pass(f.skip_size_pass);

  ClusterdCall call(ctx, "k-means");
  ProgressDisplay* display = call.display();
  auto on_progress = [&](const v1::ClusterProgress& p) {
    if (!display) return;
    if (p.has_iteration()) {
      const auto& it = p.iteration();
      display->Line(Fmt("iteration %3.0f", it.iteration() + 1) +
                    Fmt("/%.0f  objective %.6g", f.niter, it.objective()) +
                    Fmt("  imbalance %.3f  ", it.imbalance_factor()) +
                    FormatDuration(it.seconds()));
      display->Update((it.iteration() + 1.0) / f.niter,
                      Fmt("iteration %.0f/%.0f", it.iteration() + 1, f.niter) + " " +
                          FormatDuration(it.seconds()));
    } else if (p.has_note()) {
      display->Line(p.note());
    }
  };
  StatusOr<v1::ClusterResult> result = call.client().Cluster(req, on_progress, call.control());
  if (!result.ok()) {
    return call.Fail(
        result.status(),
        "the k-means job was cancelled on mlcd-clusterd; no centroids were written to " +
            req.centroids_out());
  }
  if (!call.text()) {
    std::cout << ToJson(*result) << "\n";
    return kExitOk;
  }
  const auto& r = *result;
  display->Finish("done in " + FormatDuration(r.seconds()));
  std::cout << "centroids: " << r.centroids_path() << " (" << r.k() << " x " << r.d() << ")\n"
            << "points: " << r.num_points() << " (" << r.num_train_points()
            << " trained on), final objective " << Fmt("%.6g", r.final_objective()) << "\n";
  if (r.has_sizes()) {
    std::cout << "cluster sizes: min " << r.sizes().min() << ", max " << r.sizes().max()
              << ", mean " << Fmt("%.1f", r.sizes().mean()) << ", stddev "
              << Fmt("%.1f", r.sizes().stddev()) << ", empty " << r.sizes().empty_clusters()
              << ", imbalance " << Fmt("%.3f", r.sizes().imbalance_factor()) << "\n";
  } else {
    std::cout << "cluster sizes: not computed (--skip-size-pass; mlcdctl assign reports them)\n";
  }
  std::cout << "time: read " << FormatDuration(r.read_seconds()) << ", k-means "
            << FormatDuration(r.train_seconds()) << ", sizes " << FormatDuration(r.sizes_seconds())
            << "\n";
  return kExitOk;
}

struct AssignFlags {
  FeatureFlags features;
  std::string centroids;
  int l = 8;
  std::string label_set;
  std::string method = "exact";
  int search_effort = 0;
  int recall_sample = 10000;
  std::string class_labels;
  bool replace = false;
  // Where the daemon writes the label set: the global --labelstore / MLCD_LABELSTORE when given
  // (else empty: the daemon's own --labelstore); --into-labelstore is its deprecated alias.
  std::string labelstore;
  std::string into_labelstore;
  std::vector<std::string> metadata;
};

int RunAssign(const Context& ctx, const AssignFlags& f) {
  v1::AssignRequest req;
  FillFeatures(f.features, req.mutable_features());
  req.set_centroids_path(Absolute(f.centroids, f.features.remote_paths));
  req.set_l(f.l);
  req.set_label_set(f.label_set);
  req.set_labelstore(f.into_labelstore.empty() ? f.labelstore : f.into_labelstore);
  auto method = ParseSearchMethod(f.method);  // --method is checked against SearchMethodNames()
  req.set_method(method.ok() ? clusterd::SearchMethodToProto(*method) : v1::SEARCH_METHOD_EXACT);
  req.set_threads(f.features.threads);
  req.set_search_effort(f.search_effort);
  req.set_recall_sample(f.recall_sample);
  if (!f.class_labels.empty())
    req.set_class_labels_path(Absolute(f.class_labels, f.features.remote_paths));
  req.set_replace_existing(f.replace);
  req.set_request_id(f.features.request_id);
  for (const auto& kv : f.metadata) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return ctx.Fail(Status::InvalidArgument("--metadata expects KEY=VALUE, got '" + kv + "'"));
    }
    (*req.mutable_metadata())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }

  ClusterdCall call(ctx, "assign");
  ProgressDisplay* display = call.display();
  auto on_progress = [&](const v1::AssignProgress& p) {
    if (!display) return;
    if (p.has_status()) {
      const auto& s = p.status();
      double frac = s.rows_total() > 0 ? static_cast<double>(s.rows_done()) / s.rows_total() : -1;
      double rate = s.seconds() > 0 ? s.rows_done() / s.seconds() : 0;
      display->Update(frac, std::to_string(s.rows_done()) + "/" + std::to_string(s.rows_total()) +
                                " rows, " + Fmt("%.0f rows/s", rate));
    } else if (p.has_note()) {
      display->Line(p.note());
    }
  };
  StatusOr<v1::AssignResult> result = call.client().Assign(req, on_progress, call.control());
  if (!result.ok()) {
    return call.Fail(result.status(),
                     "the assignment was cancelled on mlcd-clusterd and its label set " +
                         req.label_set() + " removed");
  }
  if (!call.text()) {
    std::cout << ToJson(*result) << "\n";
    return kExitOk;
  }
  const auto& r = *result;
  display->Finish("done in " + FormatDuration(r.seconds()));
  std::cout << "label set: " << r.label_set() << " (sealed, " << r.label_set_samples()
            << " samples, k = " << r.k() << ", l = " << r.l() << ")\n";
  if (r.method() != v1::SEARCH_METHOD_EXACT) {
    std::cout << "approximate recall@" << r.l() << ": " << Fmt("%.4f", r.approx_recall()) << " on "
              << r.recall_rows() << " sampled rows\n";
  }
  std::cout << "top-1 cluster sizes: min " << r.sizes().min() << ", max " << r.sizes().max()
            << ", empty " << r.sizes().empty_clusters() << ", imbalance "
            << Fmt("%.3f", r.sizes().imbalance_factor()) << "\n";
  if (r.has_quality()) {
    const auto& q = r.quality();
    std::cout << "label quality (paper A.8): true class recalled by the top-1 cluster "
              << Fmt("%.1f%%", 100 * q.top1_recall()) << ", by the top-" << r.l() << " clusters "
              << Fmt("%.1f%%", 100 * q.topl_recall()) << "; NMI (top-1) " << Fmt("%.4f", q.nmi())
              << " (" << q.num_classes() << " classes, " << q.clusters_used()
              << " clusters used)\n";
  }
  std::cout << "time: " << FormatDuration(r.seconds()) << " (search "
            << FormatDuration(r.search_seconds()) << ")\n";
  return kExitOk;
}

CommandRegistration reg(40, [](CLI::App& app, Context& ctx) {
  // The callbacks own the flags (the options write into them while the app parses).
  auto cluster_flags = std::make_shared<ClusterFlags>();
  auto* cluster = app.add_subcommand(
      "cluster",
      "spherical k-means of feature shards on mlcd-clusterd; writes k x d centroids (.npy)");
  AddFeatureFlags(cluster, &cluster_flags->features);
  cluster->add_option("--k", cluster_flags->k, "number of centroids")
      ->required()
      ->check(CLI::PositiveNumber);
  cluster->add_option("--niter", cluster_flags->niter, "k-means iterations")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cluster
      ->add_option("--seed", cluster_flags->seed,
                   "seed of the training sample and initial centroids")
      ->capture_default_str();
  cluster
      ->add_option("--max-points-per-centroid", cluster_flags->max_points_per_centroid,
                   "training sample cap: k * this rows (FAISS's default)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cluster->add_option("--out", cluster_flags->out, "where the daemon writes the centroids .npy")
      ->required();
  cluster->add_flag(
      "--skip-size-pass", cluster_flags->skip_size_pass,
      "no final pass over all rows for the cluster sizes (mlcdctl assign reports them)");
  cluster->callback([&ctx, cluster_flags] { ctx.exit_code = RunCluster(ctx, *cluster_flags); });

  auto assign_flags = std::make_shared<AssignFlags>();
  auto* assign = app.add_subcommand("assign",
                                    "give every sample its top-l centroids on mlcd-clusterd and "
                                    "store them as a sealed label set");
  AddFeatureFlags(assign, &assign_flags->features);
  assign
      ->add_option("--centroids", assign_flags->centroids,
                   "k x d centroids .npy (e.g. from mlcdctl cluster)")
      ->required();
  assign->add_option("--l", assign_flags->l, "labels per sample (1 <= l <= k)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  assign
      ->add_option("--label-set", assign_flags->label_set,
                   "name of the label set to create, e.g. demo/r0")
      ->required();
  assign->add_option("--method", assign_flags->method, "exact | hnsw | ivf")
      ->check(CLI::IsMember(SearchMethodNames()))
      ->capture_default_str();
  assign
      ->add_option("--search-effort", assign_flags->search_effort,
                   "HNSW efSearch / IVF nprobe (0 = default)")
      ->capture_default_str();
  assign
      ->add_option("--recall-sample", assign_flags->recall_sample,
                   "rows sampled to measure approximate recall against exact")
      ->capture_default_str();
  assign->add_option("--class-labels", assign_flags->class_labels,
                     "true class per row (.npy int): report the paper's A.8 label recall and NMI");
  assign->add_flag("--replace", assign_flags->replace,
                   "delete an existing label set of that name first");
  // Deprecated spelling of the global --labelstore, kept for old scripts; not in --help.
  assign->add_option("--into-labelstore", assign_flags->into_labelstore)->group("");
  assign->add_option("--metadata", assign_flags->metadata,
                     "KEY=VALUE stored with the label set (repeatable)");
  assign->footer(
      "The daemon writes the label set to the label store named by the global --labelstore ADDR\n"
      "(or MLCD_LABELSTORE) when one is given, else to its own --labelstore. The address is "
      "dialled\n"
      "by the daemon, so it must be reachable from there.");
  assign->callback([&app, &ctx, assign_flags] {
    // The global flag counts when given on the command line or through MLCD_LABELSTORE; its
    // default (a local store) must not override the daemon's own --labelstore.
    const CLI::Option* global = app.get_option_no_throw("--labelstore");
    assign_flags->labelstore = global && global->count() > 0 ? ctx.labelstore : "";
    if (!assign_flags->into_labelstore.empty()) {
      std::cerr << "warning: --into-labelstore is deprecated; use the global flag: mlcdctl "
                   "--labelstore ADDR assign ...\n";
    }
    ctx.exit_code = RunAssign(ctx, *assign_flags);
  });
});

}  // namespace
}  // namespace mlcd::cli
