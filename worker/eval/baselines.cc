#include "worker/eval/baselines.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "worker/eval/features.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kRandomInit = "random-init";
constexpr const char* kRawPixels = "raw-pixels";

std::string Deterministic(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// Size and modification time of a dataset index directory's files ("" when not a path).
std::string IndexStamp(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return "";
  std::ostringstream s;
  auto stamp = [&](const fs::path& p) {
    std::error_code e;
    if (!fs::is_regular_file(p, e)) return;
    s << p.filename().string() << ':' << fs::file_size(p, e) << ':'
      << fs::last_write_time(p, e).time_since_epoch().count() << ';';
  };
  if (fs::is_directory(path, ec)) {
    // The folder's own time changes when an entry is added, removed or renamed; its files'
    // size and time when one is rewritten in place. (Files deeper down, e.g. the images of
    // an image folder's class folders, are covered by the dataset's index, stamped apart.)
    s << fs::last_write_time(path, ec).time_since_epoch().count() << ';';
    for (const auto& entry : fs::directory_iterator(path, ec)) stamp(entry.path());
  } else {
    stamp(path);
  }
  return s.str();
}

// The job's spec with defaults: given, or its checkpoint's.
StatusOr<v1::JobSpec> JobSpecOf(const EvaluationOptions& job) {
  v1::JobSpec spec;
  if (job.has_spec) {
    spec = job.spec;
  } else {
    if (job.checkpoint.empty())
      return Status::InvalidArgument("baselines need the job's spec or its checkpoint");
    MLCD_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpoint(job.checkpoint));
    MLCD_ASSIGN_OR_RETURN(spec, ReadCheckpointSpec(dir));
  }
  ApplyJobSpecDefaults(&spec);
  return spec;
}

// The options of one baseline's evaluation: alone (world size 1), nothing written, no Fig. 3.
EvaluationOptions BaselineOptions(const EvaluationOptions& job, const v1::JobSpec& spec,
                                  const std::string& name) {
  EvaluationOptions o = job;
  o.spec = spec;
  o.has_spec = true;
  o.checkpoint.clear();
  o.rank = 0;
  o.world_size = 1;
  o.rendezvous.clear();
  o.output_dir.clear();
  o.keep_embeddings = false;
  o.label_set.clear();
  o.labelstore_address.clear();
  o.train_features.clear();
  o.test_features.clear();
  o.train_labels.clear();
  o.test_labels.clear();
  o.annotations.reset();  // read from the dataset, as the model's
  o.model_test_logits.clear();
  o.predict_test_labels = nullptr;
  o.on_event = [job, name](const nlohmann::json& event) {
    if (!job.on_event) return;
    nlohmann::json e = event;
    if (e.contains("phase") && e["phase"].is_string())
      e["phase"] = "baseline " + name + ": " + e["phase"].get<std::string>();
    job.on_event(e);
  };
  return o;
}

// One split's raw-pixel features as an embedding shard in `dir`.
Status WritePixelShard(const ImageDataset& data, int image_size, const std::string& dir,
                       const EvaluationOptions& o, const char* phase) {
  const int64_t rows = data.size();
  const int64_t c = data.channels();
  int64_t side = image_size;
  if (c * side * side > kMaxPixelFeatureDim)
    side =
        static_cast<int64_t>(std::floor(std::sqrt(static_cast<double>(kMaxPixelFeatureDim) / c)));
  const int64_t cols = c * side * side;
  FeatureMatrix features(rows, cols);
  std::vector<int64_t> ids, labels;
  const auto& classes = data.class_labels();
  AugmentOptions no_augment;
  no_augment.enabled = false;
  const int64_t batch = std::max<int64_t>(1, o.batch_size);
  for (int64_t b = 0; b < rows; b += batch) {
    const int64_t n = std::min(batch, rows - b);
    std::vector<int64_t> batch_ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) batch_ids[static_cast<size_t>(i)] = b + i;
    MLCD_ASSIGN_OR_RETURN(PreparedImages prepared,
                          data.Prepare(batch_ids, no_augment, 0, 0, image_size));
    torch::Tensor x = prepared.images.to(torch::kFloat);
    if (side != image_size) x = torch::adaptive_avg_pool2d(x, {side, side});
    x = x.reshape({n, cols});
    x = (x / x.norm(2, {1}, true).clamp_min(1e-12)).contiguous();
    std::memcpy(features.row(b), x.data_ptr<float>(), sizeof(float) * n * cols);
    for (int64_t id : batch_ids) {
      ids.push_back(id);
      if (!classes.empty()) labels.push_back(classes[static_cast<size_t>(id)]);
    }
    if (o.on_event && (b + n == rows))
      o.on_event(
          {{"event", "progress"}, {"phase", phase}, {"rows_done", b + n}, {"rows_total", rows}});
  }
  return WriteEmbeddingShard(dir, 0, 1, features, ids, classes.empty() ? nullptr : &labels);
}

StatusOr<EvaluationReport> EvaluateRawPixels(const EvaluationOptions& o, const v1::JobSpec& spec,
                                             const std::string& scratch) {
  const v1::EvaluationSpec& eval = spec.evaluation();
  const uint64_t train_limit =
      o.train_limit >= 0 ? static_cast<uint64_t>(o.train_limit) : eval.train_limit();
  const uint64_t test_limit =
      o.test_limit >= 0 ? static_cast<uint64_t>(o.test_limit) : eval.test_limit();
  v1::DatasetSpec train_ds = eval.dataset();
  if (train_limit > 0 && (train_ds.limit() == 0 || train_limit < train_ds.limit()))
    train_ds.set_limit(train_limit);
  MLCD_ASSIGN_OR_RETURN(auto train, OpenImageDataset(train_ds, "train", 0, &spec.model()));
  MLCD_ASSIGN_OR_RETURN(
      auto test,
      OpenImageDataset(eval.dataset(), "test", static_cast<int64_t>(test_limit), &spec.model()));
  MLCD_ASSIGN_OR_RETURN(EvalAnnotations annotations, AnnotationsOf(*train, *test));
  if ((train->class_labels().empty() || test->class_labels().empty()) && annotations.empty())
    return Status::FailedPrecondition(
        "the evaluation dataset has no class labels and no annotations: " + train->Describe());
  const int image_size = spec.model().image_size();
  MLCD_RETURN_IF_ERROR(WritePixelShard(*train, image_size, scratch + "/train", o, "pixels train"));
  MLCD_RETURN_IF_ERROR(WritePixelShard(*test, image_size, scratch + "/test", o, "pixels test"));
  EvaluationOptions features = o;
  features.spec = spec;
  features.train_features = {scratch + "/train"};
  features.test_features = {scratch + "/test"};
  features.annotations = std::make_shared<const EvalAnnotations>(std::move(annotations));
  features.train_limit = -1;  // the shards hold the limited splits already
  features.test_limit = -1;
  features.spec.mutable_evaluation()->set_train_limit(0);
  features.spec.mutable_evaluation()->set_test_limit(0);
  return RunEvaluation(features);
}

StatusOr<v1::BaselineResult> ReadCached(const std::string& path) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(path));
  v1::BaselineResult result;
  if (!google::protobuf::util::JsonStringToMessage(text, &result).ok())
    return Status::DataLoss(path + ": not a cached baseline result");
  result.set_cached(true);
  return result;
}

}  // namespace

StatusOr<std::string> BaselineCacheKey(const EvaluationOptions& job, const std::string& name) {
  MLCD_ASSIGN_OR_RETURN(v1::JobSpec spec, JobSpecOf(job));
  const v1::EvaluationSpec& eval = spec.evaluation();
  std::ostringstream s;
  s << name << '\n' << Deterministic(eval.dataset()) << '\n';
  s << IndexStamp(eval.dataset().index()) << '\n' << IndexStamp(eval.dataset().test_index());
  s << '\n' << IndexStamp(eval.dataset().path());
  for (const std::string& p : eval.dataset().paths()) s << '\n' << IndexStamp(p);
  s << "\nlimits "
    << (job.train_limit >= 0 ? static_cast<uint64_t>(job.train_limit) : eval.train_limit()) << ' '
    << (job.test_limit >= 0 ? static_cast<uint64_t>(job.test_limit) : eval.test_limit());
  s << "\nknn " << (job.knn_k > 0 ? job.knn_k : eval.knn_k()) << ' '
    << (job.knn_temperature > 0 ? job.knn_temperature : eval.knn_temperature());
  s << "\nprobe " << job.probe.fixed_lambda << ' ' << job.probe.validation_fraction << ' '
    << job.probe.solver.max_iterations << ' ' << job.run_probe << ' ' << job.run_knn << ' '
    << eval.linear_probe() << ' ' << eval.knn();
  s << "\nannotations " << job.run_multi_label << ' ' << job.run_attributes << ' '
    << eval.multi_label() << ' ' << eval.attributes();
  s << "\nimage " << spec.model().image_size() << ' ' << spec.model().channels();
  if (name == kRandomInit) {
    s << "\nmodel " << Deterministic(spec.model()) << "\nseed " << spec.training().seed()
      << "\nfeatures " << (job.features.empty() ? eval.features() : job.features) << ' '
      << (job.feature_blocks > 0 ? job.feature_blocks : eval.feature_blocks());
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a(s.str())));
  return std::string(hex);
}

StatusOr<std::vector<v1::BaselineResult>> RunBaselines(const EvaluationOptions& job,
                                                       const std::string& cache_dir) {
  MLCD_ASSIGN_OR_RETURN(v1::JobSpec spec, JobSpecOf(job));
  if (!cache_dir.empty()) MLCD_RETURN_IF_ERROR(MakeConfinedDirs(cache_dir));
  std::vector<v1::BaselineResult> results;
  for (const char* name : {kRandomInit, kRawPixels}) {
    MLCD_ASSIGN_OR_RETURN(std::string key, BaselineCacheKey(job, name));
    const std::string path = cache_dir.empty() ? "" : cache_dir + "/" + name + "-" + key + ".json";
    if (!path.empty() && std::filesystem::exists(path)) {
      auto cached = ReadCached(path);
      if (cached.ok()) {
        MLCD_LOG(INFO) << "baseline " << name << ": cached in " << path;
        results.push_back(*cached);
        continue;
      }
      MLCD_LOG(WARNING) << "ignoring the baseline cache: " << cached.status().ToString();
    }
    const auto start = Clock::now();
    EvaluationOptions o = BaselineOptions(job, spec, name);
    StatusOr<EvaluationReport> report = Status::Internal("not run");
    if (std::string(name) == kRandomInit) {
      report = RunEvaluation(o);
    } else {
      const std::string scratch =
          (cache_dir.empty() ? std::filesystem::temp_directory_path().string() : cache_dir) +
          "/tmp-pixels-" + key + "-" + std::to_string(::getpid());
      report = EvaluateRawPixels(o, spec, scratch);
      std::error_code ec;
      std::filesystem::remove_all(scratch, ec);
    }
    if (!report.ok()) return report.status().WithContext("baseline " + std::string(name));
    v1::BaselineResult r;
    r.set_name(name);
    r.set_linear_probe_accuracy(report->result.linear_probe_accuracy());
    r.set_knn_accuracy(report->result.knn_accuracy());
    if (report->result.has_multi_label()) *r.mutable_multi_label() = report->result.multi_label();
    *r.mutable_attributes() = report->result.attributes();
    r.set_seconds(std::chrono::duration<double>(Clock::now() - start).count());
    MLCD_LOG(INFO) << "baseline " << name << ": linear probe " << 100 * r.linear_probe_accuracy()
                   << " %, kNN " << 100 * r.knn_accuracy() << " % (" << r.seconds() << " s)";
    if (!path.empty()) {
      std::string json;
      (void)google::protobuf::util::MessageToJsonString(r, &json);
      Status st = WriteConfinedFile(path, json + "\n");
      if (!st.ok()) MLCD_LOG(WARNING) << "baseline cache not written: " << st.ToString();
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace mlcd::worker
