// mlcd-clusterd: the clustering service (FAISS spherical k-means and top-l assignment into
// mlcd-labelstore), and `mlcd-clusterd features`, which writes feature files to cluster.
//
//   mlcd-clusterd --listen 127.0.0.1:7620 --labelstore 127.0.0.1:7610
//   mlcd-clusterd features --kind pixels --out feats/train.npy --labels-out feats/train.labels.npy
//   mlcd-clusterd features --kind synthetic --rows 500000 --dim 128 --centres 4096 --shards 4 --out feats/
#include <iostream>

#include "clusterd/feature_gen.h"
#include "clusterd/service.h"
#include "common/blas_env.h"
#include "common/confined_file.h"
#include "common/data_roots.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/malloc_env.h"
#include "common/metrics.h"

namespace {

struct FeaturesFlags {
  std::string kind = "pixels";
  std::string out;
  std::string labels_out;
  std::string centres_out;
  std::string split = "train";
  std::string dataset_dir = mlcd::kFashionMnistDir;
  std::string dtype = "float32";
  int64_t limit = 0;
  int dim = 0;
  uint64_t seed = 0;
  int64_t rows = 10000;
  int centres = 16;
  double noise = 0.5;
  int shards = 1;
};

int RunFeatures(const FeaturesFlags& f) {
  mlcd::NpyDtype dtype = f.dtype == "float16" ? mlcd::NpyDtype::kFloat16 : mlcd::NpyDtype::kFloat32;
  mlcd::StatusOr<mlcd::clusterd::FeatureFileInfo> info = mlcd::Status::Internal("unset");
  if (f.kind == "synthetic") {
    mlcd::clusterd::SyntheticMixtureOptions o;
    o.rows = f.rows;
    o.dim = f.dim > 0 ? f.dim : 32;
    o.num_centres = f.centres;
    o.noise = f.noise;
    o.seed = f.seed == 0 ? 1 : f.seed;
    o.shards = f.shards;
    o.dtype = dtype;
    o.out_dir = f.out;
    o.centres_out = f.centres_out;
    o.labels_out = f.labels_out;
    info = mlcd::clusterd::WriteSyntheticMixture(o);
  } else {
    mlcd::clusterd::FashionMnistFeatureOptions o;
    o.kind = f.kind;
    o.split = f.split;
    o.limit = f.limit;
    o.dim = f.dim > 0 ? f.dim : 128;
    o.seed = f.seed;
    o.dtype = dtype;
    o.dataset_dir = f.dataset_dir;
    o.features_out = f.out;
    o.labels_out = f.labels_out;
    info = mlcd::clusterd::WriteFashionMnistFeatures(o);
  }
  if (!info.ok()) {
    std::cerr << "error: " << info.status().ToString() << "\n";
    return info.status().code() == mlcd::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << "wrote " << info->rows << " x " << info->d << " " << f.dtype << " features to";
  for (const auto& p : info->feature_paths) std::cout << " " << p;
  std::cout << "\n";
  if (!info->labels_path.empty()) std::cout << "wrote labels to " << info->labels_path << "\n";
  if (!info->centres_path.empty()) std::cout << "wrote centres to " << info->centres_path << "\n";
  return 0;
}

// --private-dir and --output-root (docs/hardening.md, "Private folders" and "Outputs").
void AddOutputFlags(CLI::App& app, std::vector<std::string>* private_dirs,
                    std::string* output_root) {
  mlcd::AddPrivateDirFlag(app, private_dirs);
  app.add_option(
      "--output-root", *output_root,
      "Folder the outputs a caller names (centroids_out, generated features) must go "
      "under, one area per identity: DIR/users/<kind>/<name>/ for a user, "
      "DIR/jobs/<id>/ and DIR/features/ for the coordinator's phases (give the "
      "coordinator's --data-dir, shared). Reads stay under the data roots. Default: none, "
      "outputs go anywhere under the data roots. docs/hardening.md");
}

// The daemon's read roots, private folders and output areas from its flags, logged.
mlcd::Status ConfinePaths(const std::string& data_dir, const std::vector<std::string>& data_roots,
                          std::vector<std::string> private_dirs, const std::string& output_root,
                          mlcd::clusterd::ClusterdOptions* options) {
  for (const auto& dir : mlcd::OwnStateDirs(data_dir)) private_dirs.push_back(dir);
  // Nothing under the output root but its areas is read or written (the coordinator's
  // database beside its jobs/ when DIR is the coordinator's --data-dir).
  if (!output_root.empty()) private_dirs.push_back(output_root);
  MLCD_ASSIGN_OR_RETURN(mlcd::DataRoots roots,
                        mlcd::DataRoots::FromFlags(data_roots, data_dir, private_dirs));
  MLCD_ASSIGN_OR_RETURN(options->output_areas, mlcd::clusterd::OutputAreas::Make(output_root));
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> area_dirs,
                        options->output_areas.MakeAreaFolders());
  // The output areas are read as well: Assign reads the centroids a Cluster call wrote.
  std::vector<std::string> readable = roots.roots();
  readable.insert(readable.end(), area_dirs.begin(), area_dirs.end());
  MLCD_ASSIGN_OR_RETURN(options->data_roots, mlcd::DataRoots::Make(readable, private_dirs));
  MLCD_LOG(INFO) << "data roots: " << options->data_roots.Describe();
  if (options->output_areas.enabled()) {
    MLCD_LOG(INFO) << "outputs: one area per caller under " << options->output_areas.root();
  } else {
    MLCD_LOG(WARNING) << "no --output-root: a caller's outputs may go anywhere under the data "
                         "roots, so callers can replace each other's files; give --output-root "
                         "to separate reads from writes (docs/hardening.md)";
  }
  return mlcd::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  mlcd::SelectOpenblasCoretype(argc, argv);
  mlcd::KeepFreedMemoryForReuse();  // common/malloc_env.h
  mlcd::InstallShutdownSignalHandling();

  CLI::App app{
      "mlcd-clusterd: spherical k-means (FAISS) of feature shards and top-l assignment of every\n"
      "sample to its nearest centroids, written as a label set into mlcd-labelstore.\n"
      "Without a subcommand it serves the mlcd.v1.Clusterd gRPC API (health and reflection on)\n"
      "and Prometheus /metrics. One job runs at a time; others wait in a queue of --max-queued.",
      "mlcd-clusterd"};
  mlcd::ServiceFlags flags;
  mlcd::AddServiceFlags(app, &flags, "127.0.0.1:" + std::to_string(mlcd::kDefaultClusterdPort),
                        "127.0.0.1:" + std::to_string(mlcd::kDefaultClusterdPort + 1),
                        "./.mlcd/clusterd");
  std::string labelstore;
  mlcd::AddPeerFlag(app, "labelstore", &labelstore,
                    "127.0.0.1:" + std::to_string(mlcd::kDefaultLabelstorePort));
  std::vector<std::string> data_roots;
  mlcd::AddDataRootFlag(app, &data_roots,
                        "--data-dir and /usr/share/datasets (where dataset-fashion-mnist lives)");
  std::vector<std::string> private_dirs;
  std::string output_root;
  AddOutputFlags(app, &private_dirs, &output_root);
  int max_queued = 8;
  app.add_option("--max-queued", max_queued,
                 "calls that may wait for the running job before RESOURCE_EXHAUSTED")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  FeaturesFlags ff;
  auto* features = app.add_subcommand(
      "features",
      "write feature .npy files to cluster: Fashion-MNIST round-0 features (kind pixels or\n"
      "random-projection; row i = image i of the split = sample id i) or a synthetic mixture of\n"
      "Gaussians on the sphere (kind synthetic)");
  features->add_option("--kind", ff.kind, "pixels | random-projection | synthetic")
      ->check(CLI::IsMember({"pixels", "random-projection", "synthetic"}))
      ->capture_default_str();
  features
      ->add_option("--out", ff.out,
                   "output .npy file (Fashion-MNIST) or directory of shards (synthetic)")
      ->required();
  features->add_option("--labels-out", ff.labels_out,
                       "also write the class labels (Fashion-MNIST) or mixture components "
                       "(synthetic) as int64 .npy; "
                       "for quality reports only");
  features->add_option("--centres-out", ff.centres_out,
                       "synthetic: also write the true centres as .npy");
  features->add_option("--split", ff.split, "Fashion-MNIST split: train | test")
      ->check(CLI::IsMember({"train", "test"}))
      ->capture_default_str();
  features->add_option("--dataset-dir", ff.dataset_dir, "Fashion-MNIST IDX directory")
      ->capture_default_str();
  features->add_option("--limit", ff.limit, "Fashion-MNIST: only the first N images (0 = all)")
      ->capture_default_str();
  features->add_option("--dim", ff.dim,
                       "random-projection output dim (default 128) / synthetic dim (default 32)");
  features->add_option("--dtype", ff.dtype, "float32 | float16")
      ->check(CLI::IsMember({"float32", "float16"}))
      ->capture_default_str();
  features->add_option("--seed", ff.seed, "projection / mixture seed")->capture_default_str();
  features->add_option("--rows", ff.rows, "synthetic: rows")->capture_default_str();
  features->add_option("--centres", ff.centres, "synthetic: mixture components")
      ->capture_default_str();
  features
      ->add_option("--noise", ff.noise,
                   "synthetic: noise scale (cosine to centre ~ 1/sqrt(1+noise^2))")
      ->capture_default_str();
  features->add_option("--shards", ff.shards, "synthetic: number of shard files")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (features->parsed()) return RunFeatures(ff);

  if (!mlcd::ApplyLogFlags(flags, "clusterd")) return 2;
  mlcd::MetricsServer metrics;
  mlcd::Status st = metrics.Serve(flags.metrics_listen);
  if (!st.ok()) {
    MLCD_LOG(ERROR) << st.ToString();
    return 1;
  }
  if (!flags.data_dir.empty()) {
    st = mlcd::MakeDirs(flags.data_dir);
    if (!st.ok()) {
      MLCD_LOG(ERROR) << st.ToString();
      return 1;
    }
  }
  mlcd::clusterd::ClusterdOptions options;
  options.data_dir = flags.data_dir;
  st = ConfinePaths(flags.data_dir, data_roots, private_dirs, output_root, &options);
  if (!st.ok()) {
    MLCD_LOG(ERROR) << st.ToString();
    return 2;
  }
  // Every file a request leads clusterd to open or write is verified where it was opened
  // (common/confined_file.h), the generated features' dataset files included.
  mlcd::InstallProcessDataRoots(options.data_roots);
  options.labelstore_address = labelstore;
  options.max_queued = max_queued;
  mlcd::clusterd::ClusterdService service(options, metrics.registry());
  mlcd::GrpcServerRunner runner("clusterd");
  runner.AddService(&service);
  runner.set_max_receive_message_bytes(mlcd::kMaxClusterdRequestBytes);
  runner.SetHealthListen(flags.health_listen);
  st = runner.Start(flags.listen);
  if (!st.ok()) {
    MLCD_LOG(ERROR) << st.ToString();
    return 1;
  }
  MLCD_LOG(INFO) << "mlcd-clusterd serving on port " << runner.port()
                 << (flags.metrics_listen.empty()
                         ? std::string()
                         : ", metrics on port " + std::to_string(metrics.port()))
                 << ", label store " << labelstore;
  runner.WaitForShutdown();
  MLCD_LOG(INFO) << "mlcd-clusterd stopped";
  return 0;
}
