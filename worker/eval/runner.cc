#include "worker/eval/runner.h"

#include <dirent.h>
#include <google/protobuf/util/json_util.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "clients/labelstore_client.h"
#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/npy.h"
#include "common/stopwatch.h"
#include "worker/dist/collectives.h"
#include "worker/dist/host_ranks.h"
#include "worker/eval/embed.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"

namespace mlcd::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps the first `limit` rows (limit <= 0: all).
void Truncate(LabelledFeatures* f, int64_t limit) {
  if (limit <= 0 || limit >= f->features.rows) return;
  f->features.rows = limit;
  f->features.values.resize(static_cast<size_t>(limit * f->features.cols));
  if (!f->labels.empty()) f->labels.resize(static_cast<size_t>(limit));
  if (!f->ids.empty()) f->ids.resize(static_cast<size_t>(limit));
}

// The smaller of two row limits where 0 means "no limit".
uint64_t MinLimit(uint64_t a, uint64_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

// Gathers every rank's part (rows [N·ρ/W, N·(ρ+1)/W)) of a split to all ranks: parts are
// padded to the largest part so that every rank contributes the same shape.
Status GatherParts(Collectives* comm, int64_t total, LabelledFeatures* part) {
  const int W = comm->world_size();
  int64_t max_rows = 0;
  for (int r = 0; r < W; ++r) {
    int64_t b, e;
    ContiguousPart(total, r, W, &b, &e);
    max_rows = std::max(max_rows, e - b);
  }
  const int64_t d = part->features.cols;
  at::Tensor feats = at::zeros({max_rows, d}, at::kFloat);
  at::Tensor labels = at::full({max_rows}, -1, at::kLong);
  if (part->features.rows > 0) {
    std::memcpy(feats.data_ptr<float>(), part->features.values.data(),
                sizeof(float) * part->features.values.size());
    if (!part->labels.empty())
      std::memcpy(labels.data_ptr<int64_t>(), part->labels.data(),
                  sizeof(int64_t) * part->labels.size());
  }
  at::Tensor all_feats, all_labels;
  MLCD_RETURN_IF_ERROR(comm->AllGather(feats, &all_feats));
  MLCD_RETURN_IF_ERROR(comm->AllGather(labels, &all_labels));
  LabelledFeatures out;
  out.features = FeatureMatrix(total, d);
  const float* fp = all_feats.data_ptr<float>();
  const int64_t* lp = all_labels.data_ptr<int64_t>();
  bool has_labels = true;
  for (int r = 0; r < W; ++r) {
    int64_t b, e;
    ContiguousPart(total, r, W, &b, &e);
    std::memcpy(out.features.row(b), fp + r * max_rows * d, sizeof(float) * (e - b) * d);
    for (int64_t i = 0; i < e - b; ++i) {
      int64_t v = lp[r * max_rows + i];
      if (v < 0) has_labels = false;
      out.labels.push_back(v);
      out.ids.push_back(b + i);
    }
  }
  if (!has_labels) out.labels.clear();
  *part = std::move(out);
  return Status::Ok();
}

bool ParseRange(const std::string& name, int64_t* begin, int64_t* end) {
  // class_centres.<begin>-<end>.weight.npy
  const std::string prefix = "class_centres.", suffix = ".weight.npy";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  size_t dash = mid.find('-');
  if (dash == std::string::npos) return false;
  try {
    *begin = std::stoll(mid.substr(0, dash));
    *end = std::stoll(mid.substr(dash + 1));
  } catch (...) {
    return false;
  }
  return *end >= *begin;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace

void MeanPositiveNegativeCosine(const FeatureMatrix& embeddings, const std::vector<int32_t>& labels,
                                int l, const FeatureMatrix& centres, double* mean_positive,
                                double* mean_negative) {
  *mean_positive = 0;
  *mean_negative = 0;
  const int64_t k = centres.rows, d = centres.cols;
  if (embeddings.rows == 0 || k == 0 || embeddings.cols != d) return;
  FeatureMatrix unit = centres;
  L2NormalizeRows(&unit);
  std::vector<double> sum(static_cast<size_t>(d), 0.0);  // Σ_c ŵ_c
  for (int64_t c = 0; c < k; ++c)
    for (int64_t j = 0; j < d; ++j) sum[j] += unit.row(c)[j];
  double pos_sum = 0, neg_sum = 0;
  int64_t pos_pairs = 0, neg_pairs = 0;
  std::vector<int32_t> distinct;
  for (int64_t i = 0; i < embeddings.rows; ++i) {
    const float* e = embeddings.row(i);
    distinct.clear();
    for (int j = 0; j < l; ++j) {
      int32_t c = labels[static_cast<size_t>(i * l + j)];
      if (c >= 0 && c < k && std::find(distinct.begin(), distinct.end(), c) == distinct.end())
        distinct.push_back(c);
    }
    double all = 0;
    for (int64_t j = 0; j < d; ++j) all += e[j] * sum[j];
    double pos = 0;
    for (int32_t c : distinct) {
      double dot = 0;
      for (int64_t j = 0; j < d; ++j) dot += static_cast<double>(e[j]) * unit.row(c)[j];
      pos += dot;
    }
    pos_sum += pos;
    pos_pairs += static_cast<int64_t>(distinct.size());
    neg_sum += all - pos;
    neg_pairs += k - static_cast<int64_t>(distinct.size());
  }
  if (pos_pairs > 0) *mean_positive = pos_sum / static_cast<double>(pos_pairs);
  if (neg_pairs > 0) *mean_negative = neg_sum / static_cast<double>(neg_pairs);
}

StatusOr<FeatureMatrix> ReadCheckpointClassCentres(const std::string& checkpoint_dir) {
  DIR* dir = opendir(checkpoint_dir.c_str());
  if (!dir) return Status::NotFound(checkpoint_dir + ": cannot open the checkpoint directory");
  std::map<int64_t, std::pair<int64_t, std::string>> ranges;  // begin -> (end, file)
  while (dirent* e = readdir(dir)) {
    int64_t b = 0, en = 0;
    if (ParseRange(e->d_name, &b, &en)) ranges[b] = {en, checkpoint_dir + "/" + e->d_name};
  }
  closedir(dir);
  if (ranges.empty())
    return Status::NotFound(checkpoint_dir + " holds no class_centres.*.weight.npy files");
  FeatureMatrix out;
  int64_t next = 0;
  for (const auto& [begin, entry] : ranges) {
    if (begin != next)
      return Status::InvalidArgument(checkpoint_dir +
                                     ": class-centre ranges do not tile [0, k): expected a range "
                                     "starting at " +
                                     std::to_string(next) + ", found " + std::to_string(begin));
    std::vector<int64_t> shape;
    MLCD_ASSIGN_OR_RETURN(std::vector<float> values, ReadNpyAsFloat32(entry.second, &shape));
    if (shape.size() != 2 || shape[0] != entry.first - begin)
      return Status::InvalidArgument(entry.second + ": expected " +
                                     std::to_string(entry.first - begin) +
                                     " rows of class centres");
    if (out.cols == 0) out.cols = shape[1];
    if (shape[1] != out.cols)
      return Status::InvalidArgument(entry.second + ": centre dimension differs");
    out.values.insert(out.values.end(), values.begin(), values.end());
    out.rows += shape[0];
    next = entry.first;
  }
  return out;
}

namespace {

void Emit(const EvaluationOptions& options, const nlohmann::json& event) {
  if (options.on_event) options.on_event(event);
}

// What the evaluation does, resolved from the options and the job spec.
struct EvalPlan {
  bool from_features = false;  // precomputed train and test features instead of a model
  v1::JobSpec spec;
  bool run_probe = false;
  bool run_knn = false;
  AnnotationEvalOptions annotations;
  uint64_t train_limit = 0;
  uint64_t test_limit = 0;
  KnnOptions knn;
  VitFeatures features = VitFeatures::kEmbedding;
  int feature_blocks = 0;
};

// The two splits' features and where they came from.
struct EvalInputs {
  LabelledFeatures train, test;
  EvalAnnotations annotations;
  // The model's own multi-label logits on the test split (EvaluationOptions).
  std::vector<double> model_test_logits;
  // The training images' embeddings for the Fig. 3 cosines when the probe sees other features.
  FeatureMatrix train_embedding;
  std::string checkpoint_dir;
  std::string model_description;
  double embed_seconds = 0;
};

// Checks the options and resolves the plan (the spec: given, the checkpoint's, or none).
StatusOr<EvalPlan> PlanEvaluation(const EvaluationOptions& options) {
  EvalPlan plan;
  plan.from_features = !options.train_features.empty() || !options.test_features.empty();
  const bool from_features = plan.from_features;
  if (from_features && (options.train_features.empty() || options.test_features.empty()))
    return Status::InvalidArgument(
        "precomputed features need both splits: give train and test features");
  if (from_features && !options.checkpoint.empty())
    return Status::InvalidArgument("give either a checkpoint or precomputed features, not both");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is outside world size " + std::to_string(options.world_size));
  if (from_features && options.world_size > 1)
    return Status::InvalidArgument(
        "precomputed features are evaluated by one process: use world size 1");

  v1::JobSpec& spec = plan.spec;
  if (options.has_spec) {
    spec = options.spec;
  } else if (!options.checkpoint.empty()) {
    MLCD_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpoint(options.checkpoint));
    MLCD_ASSIGN_OR_RETURN(spec, ReadCheckpointSpec(dir));
  } else if (!from_features) {
    return Status::InvalidArgument(
        "nothing to evaluate: give a checkpoint, a job spec (random initialisation) or "
        "precomputed train and test features");
  }
  ApplyJobSpecDefaults(&spec);
  const v1::EvaluationSpec& eval = spec.evaluation();
  plan.run_probe = options.run_probe < 0 ? eval.linear_probe() : options.run_probe > 0;
  plan.run_knn = options.run_knn < 0 ? eval.knn() : options.run_knn > 0;
  plan.annotations.multi_label =
      options.run_multi_label < 0 ? eval.multi_label() : options.run_multi_label > 0;
  plan.annotations.attributes =
      options.run_attributes < 0 ? eval.attributes() : options.run_attributes > 0;
  plan.annotations.probe = options.probe;
  plan.train_limit =
      options.train_limit >= 0 ? static_cast<uint64_t>(options.train_limit) : eval.train_limit();
  plan.test_limit =
      options.test_limit >= 0 ? static_cast<uint64_t>(options.test_limit) : eval.test_limit();
  plan.knn = options.knn;
  plan.knn.k = options.knn_k > 0 ? options.knn_k : eval.knn_k();
  plan.knn.temperature =
      options.knn_temperature > 0 ? options.knn_temperature : eval.knn_temperature();
  const std::string features_name = options.features.empty() ? eval.features() : options.features;
  MLCD_ASSIGN_OR_RETURN(plan.features, ParseVitFeatures(features_name));
  plan.feature_blocks = options.feature_blocks > 0 ? options.feature_blocks : eval.feature_blocks();
  return plan;
}

// The collectives of a sharded evaluation (none at world size 1).
StatusOr<std::unique_ptr<Collectives>> OpenEvalCollectives(const EvaluationOptions& options) {
  std::unique_ptr<Collectives> comm;
  if (options.world_size <= 1) return comm;
  if (options.rendezvous.empty())
    return Status::InvalidArgument("world size " + std::to_string(options.world_size) +
                                   " needs a rendezvous address (rank 0's TCPStore)");
  CollectivesOptions co;
  co.rank = options.rank;
  co.world_size = options.world_size;
  co.rendezvous = options.rendezvous;
  co.timeout = options.collective_timeout;
  co.store_prefix = "mlcd-eval";
  MLCD_ASSIGN_OR_RETURN(comm, Collectives::Create(co));
  return comm;
}

// Rows of `train` are [features | embedding]: keeps the embedding apart for the Fig. 3 cosines.
void SplitOffEmbedding(int64_t fdim, LabelledFeatures* train, FeatureMatrix* train_embedding) {
  const int64_t edim = train->features.cols - fdim;
  FeatureMatrix kept(train->features.rows, fdim);
  *train_embedding = FeatureMatrix(train->features.rows, edim);
  for (int64_t i = 0; i < train->features.rows; ++i) {
    std::copy(train->features.row(i), train->features.row(i) + fdim, kept.row(i));
    std::copy(train->features.row(i) + fdim, train->features.row(i) + fdim + edim,
              train_embedding->row(i));
  }
  train->features = std::move(kept);
}

// Embeds both splits of the evaluation dataset with the model (every rank its part, gathered
// to all ranks).
Status EmbedSplits(const EvaluationOptions& options, EvalPlan* plan, EvalInputs* in) {
  const v1::EvaluationSpec& eval = plan->spec.evaluation();
  // The gang first: its ranks on this host share the host's memory (model_memory.h).
  MLCD_ASSIGN_OR_RETURN(std::unique_ptr<Collectives> comm, OpenEvalCollectives(options));
  ModelLoadOptions load;
  load.batch_size = options.batch_size;
  if (comm) {
    MLCD_ASSIGN_OR_RETURN(load.ranks_on_host, RanksOnThisHost(comm.get()));
  }
  MLCD_ASSIGN_OR_RETURN(EmbeddingModel model,
                        LoadEmbeddingModel(options.checkpoint, &plan->spec, load));
  in->checkpoint_dir = model.checkpoint;
  in->model_description = model.description;
  MLCD_LOG(INFO) << "evaluating " << model.description;
  v1::DatasetSpec train_ds = eval.dataset();
  train_ds.set_limit(MinLimit(train_ds.limit(), plan->train_limit));
  MLCD_ASSIGN_OR_RETURN(auto train_data,
                        OpenImageDataset(train_ds, "train", 0, &model.spec.model()));
  MLCD_ASSIGN_OR_RETURN(auto test_data, OpenImageDataset(eval.dataset(), "test",
                                                         static_cast<int64_t>(plan->test_limit),
                                                         &model.spec.model()));
  MLCD_ASSIGN_OR_RETURN(in->annotations, AnnotationsOf(*train_data, *test_data));
  if ((train_data->class_labels().empty() || test_data->class_labels().empty()) &&
      in->annotations.empty())
    return Status::FailedPrecondition(
        "the evaluation dataset has no class labels and no annotations: " + train_data->Describe());
  auto embed = [&](const ImageDataset& data, const char* phase, LabelledFeatures* out,
                   bool with_embedding) -> Status {
    EmbedOptions eo;
    eo.rank = options.rank;
    eo.world_size = options.world_size;
    eo.batch_size = options.batch_size;
    eo.features = plan->features;
    eo.feature_blocks = plan->feature_blocks;
    eo.append_embedding = with_embedding;
    auto last = Clock::now();
    eo.on_progress = [&](int64_t done, int64_t total) {
      if (done == total || SecondsSince(last) >= 1.0) {
        last = Clock::now();
        Emit(options,
             {{"event", "progress"}, {"phase", phase}, {"rows_done", done}, {"rows_total", total}});
      }
    };
    MLCD_ASSIGN_OR_RETURN(EmbeddedPart part, EmbedDataset(model, data, eo));
    in->embed_seconds += part.seconds;
    *out = std::move(part.features);
    if (comm)
      MLCD_RETURN_IF_ERROR(
          GatherParts(comm.get(), data.size(), out).WithContext("gathering embeddings"));
    return Status::Ok();
  };
  const bool split_embedding = plan->features != VitFeatures::kEmbedding;
  MLCD_RETURN_IF_ERROR(embed(*train_data, "embed train", &in->train, split_embedding));
  MLCD_RETURN_IF_ERROR(embed(*test_data, "embed test", &in->test, false));
  if (split_embedding && options.rank == 0) {
    SplitOffEmbedding(model.model->FeatureDim(plan->features, plan->feature_blocks), &in->train,
                      &in->train_embedding);
  }
  if (options.predict_test_labels && options.rank == 0) {
    MLCD_ASSIGN_OR_RETURN(in->model_test_logits, options.predict_test_labels(model, *test_data));
  }
  return Status::Ok();
}

// The linear probe on the splits, into the report.
Status ProbeSplits(const EvaluationOptions& options, const EvalInputs& in, int num_classes,
                   EvaluationReport* report) {
  LinearProbeOptions po = options.probe;
  po.num_classes = num_classes;
  int trial = 0;
  po.on_trial = [&](const LambdaTrial& t) {
    ++trial;
    MLCD_LOG(INFO) << "linear probe: lambda " << t.lambda << " -> validation accuracy "
                   << 100 * t.validation_accuracy << "% (" << t.iterations << " L-BFGS iterations, "
                   << t.seconds << " s)";
    Emit(options, {{"event", "progress"},
                   {"phase", "linear probe"},
                   {"rows_done", trial},
                   {"rows_total", 15},
                   {"lambda", t.lambda},
                   {"validation_accuracy", t.validation_accuracy}});
  };
  MLCD_ASSIGN_OR_RETURN(
      LinearProbeResult probe,
      RunLinearProbe(in.train.features, in.train.labels, in.test.features, in.test.labels, po));
  report->result.set_linear_probe_accuracy(probe.test_accuracy);
  report->result.set_linear_probe_lambda(probe.lambda);
  nlohmann::json trials = nlohmann::json::array();
  for (const LambdaTrial& t : probe.trials)
    trials.push_back({{"lambda", t.lambda},
                      {"validation_accuracy", t.validation_accuracy},
                      {"validation_loss", t.validation_loss},
                      {"iterations", t.iterations},
                      {"converged", t.converged},
                      {"seconds", t.seconds}});
  report->details["linear_probe"] = {{"test_accuracy", probe.test_accuracy},
                                     {"lambda", probe.lambda},
                                     {"validation_accuracy", probe.validation_accuracy},
                                     {"train_accuracy", probe.train_accuracy},
                                     {"search_train_samples", probe.train_samples},
                                     {"validation_samples", probe.validation_samples},
                                     {"trials", trials},
                                     {"final_iterations", probe.model.iterations},
                                     {"final_converged", probe.model.converged},
                                     {"final_stop_reason", probe.model.stop_reason},
                                     {"final_gradient_max", probe.model.gradient_max},
                                     {"search_seconds", probe.search_seconds},
                                     {"final_fit_seconds", probe.final_fit_seconds},
                                     {"seconds", probe.seconds}};
  MLCD_LOG(INFO) << "linear probe: " << 100 * probe.test_accuracy << "% test accuracy at lambda "
                 << probe.lambda << " (" << probe.seconds << " s)";
  return Status::Ok();
}

// kNN classification of the test split against the train split, into the report.
Status KnnSplits(const EvaluationOptions& options, const EvalPlan& plan, const EvalInputs& in,
                 int num_classes, EvaluationReport* report) {
  Emit(options, {{"event", "progress"},
                 {"phase", "knn"},
                 {"rows_done", 0},
                 {"rows_total", in.test.features.rows}});
  KnnOptions ko = plan.knn;
  ko.num_classes = num_classes;
  MLCD_ASSIGN_OR_RETURN(KnnResult k, KnnClassify(in.train.features, in.train.labels,
                                                 in.test.features, in.test.labels, ko));
  report->result.set_knn_accuracy(k.accuracy);
  report->details["knn"] = {{"accuracy", k.accuracy},
                            {"k", k.k},
                            {"temperature", ko.temperature},
                            {"seconds", k.seconds}};
  MLCD_LOG(INFO) << "kNN (k=" << k.k << ", T=" << ko.temperature << "): " << 100 * k.accuracy
                 << "% (" << k.seconds << " s)";
  return Status::Ok();
}

// The multi-label protocol and the attribute probes on the splits' annotations, and the
// model's own multi-label predictions when given, into the report.
Status EvaluateAnnotationsOf(const EvaluationOptions& options, const EvalPlan& plan,
                             const EvalInputs& in, EvaluationReport* report) {
  AnnotationEvalOptions ao = plan.annotations;
  ao.on_progress = [&](const std::string& phase, int64_t done, int64_t total) {
    Emit(options,
         {{"event", "progress"}, {"phase", phase}, {"rows_done", done}, {"rows_total", total}});
  };
  MLCD_RETURN_IF_ERROR(EvaluateAnnotations(in.train.features, in.test.features, in.annotations, ao,
                                           &report->result, &report->details));
  const std::vector<double>& logits =
      in.model_test_logits.empty() ? options.model_test_logits : in.model_test_logits;
  if (logits.empty()) return Status::Ok();
  if (in.annotations.test.label_sets.rows == 0)
    return Status::InvalidArgument(
        "the model's label predictions need label sets in the evaluation dataset's test split");
  return ScoreModelPredictions(logits, in.annotations.test.label_sets,
                               report->result.mutable_model_predictions())
      .WithContext("scoring the model's label predictions");
}

// The Fig. 3 cosines of the training images' embeddings against the checkpoint's centres,
// with the labels of `label_set` from the label store.
Status MeasureFig3(const EvaluationOptions& options, const EvalInputs& in,
                   const std::string& label_set, EvaluationReport* report) {
  labelstore::LabelStoreClientOptions lo;
  lo.timeout = std::chrono::seconds(10);
  labelstore::LabelStoreClient client(options.labelstore_address, lo);
  MLCD_ASSIGN_OR_RETURN(v1::LabelSetInfo info, client.Describe(label_set));
  int64_t n = std::min<int64_t>(in.train.features.rows, static_cast<int64_t>(info.num_samples()));
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<size_t>(i)] = in.train.ids.empty() ? i : in.train.ids[i];
  labelstore::LabelBatch batch;
  MLCD_RETURN_IF_ERROR(client.GetLabels(label_set, ids.data(), ids.size(), false, &batch));
  MLCD_ASSIGN_OR_RETURN(FeatureMatrix centres, ReadCheckpointClassCentres(in.checkpoint_dir));
  const FeatureMatrix& source =
      in.train_embedding.rows > 0 ? in.train_embedding : in.train.features;
  FeatureMatrix emb(n, source.cols);
  std::copy(source.values.begin(), source.values.begin() + n * source.cols, emb.values.begin());
  double pos = 0, neg = 0;
  MeanPositiveNegativeCosine(emb, batch.labels, batch.labels_per_sample, centres, &pos, &neg);
  report->result.set_mean_positive_cosine(pos);
  report->result.set_mean_negative_cosine(neg);
  report->details["fig3"] = {{"label_set", label_set},
                             {"samples", n},
                             {"classes", centres.rows},
                             {"mean_positive_cosine", pos},
                             {"mean_negative_cosine", neg}};
  return Status::Ok();
}

// Fig. 3 quantities of the final model on its training images when they can be measured;
// otherwise the reason, in the details.
void MaybeMeasureFig3(const EvaluationOptions& options, const EvalPlan& plan, const EvalInputs& in,
                      EvaluationReport* report) {
  const v1::EvaluationSpec& eval = plan.spec.evaluation();
  std::string note;
  if (in.checkpoint_dir.empty()) {
    note = "no checkpoint (no class centres)";
  } else if (options.labelstore_address.empty()) {
    note = "no label store address";
  } else {
    auto meta = ReadCheckpointMeta(in.checkpoint_dir);
    auto model_spec = ReadCheckpointSpec(in.checkpoint_dir);
    std::string label_set = options.label_set;
    if (label_set.empty() && meta.ok()) label_set = meta->label_set;
    if (label_set.empty()) {
      note = "the checkpoint names no label set";
    } else if (model_spec.ok() && (model_spec->dataset().path() != eval.dataset().path() ||
                                   model_spec->dataset().format() != eval.dataset().format())) {
      note = "the evaluation dataset is not the training dataset";
    } else {
      Status s = MeasureFig3(options, in, label_set, report);
      if (!s.ok()) note = s.ToString();
    }
  }
  if (!note.empty()) {
    report->details["fig3_skipped"] = note;
    MLCD_LOG(INFO) << "mean positive/negative cosine not measured: " << note;
  }
}

// evaluation.json, evaluation-details.json and, when asked, the embeddings of both splits.
Status WriteOutputs(const EvaluationOptions& options, EvalInputs* in, EvaluationReport* report) {
  MLCD_RETURN_IF_ERROR(MakeConfinedDirs(options.output_dir));
  report->outputs.clear();
  MLCD_RETURN_IF_ERROR(WriteResultFiles(options.output_dir, report));
  if (!options.keep_embeddings) return Status::Ok();
  for (auto* split : {&in->train, &in->test}) {
    if (split->ids.empty()) {
      split->ids.resize(static_cast<size_t>(split->features.rows));
      std::iota(split->ids.begin(), split->ids.end(), 0);
    }
  }
  MLCD_RETURN_IF_ERROR(WriteEmbeddingShard(options.output_dir + "/train", 0, 1, in->train.features,
                                           in->train.ids, &in->train.labels));
  MLCD_RETURN_IF_ERROR(WriteEmbeddingShard(options.output_dir + "/test", 0, 1, in->test.features,
                                           in->test.ids, &in->test.labels));
  report->outputs.push_back(options.output_dir + "/train");
  report->outputs.push_back(options.output_dir + "/test");
  return Status::Ok();
}

}  // namespace

Status WriteResultFiles(const std::string& output_dir, EvaluationReport* report) {
  const std::string result_path = output_dir + "/evaluation.json";
  const std::string details_path = output_dir + "/evaluation-details.json";
  MLCD_RETURN_IF_ERROR(WriteConfinedFile(result_path, ToJson(report->result) + "\n"));
  MLCD_RETURN_IF_ERROR(WriteConfinedFile(details_path, report->details.dump(2) + "\n"));
  if (report->outputs.size() < 2 || report->outputs[0] != result_path) {
    report->outputs.insert(report->outputs.begin(), {result_path, details_path});
  }
  return Status::Ok();
}

StatusOr<EvaluationReport> RunEvaluation(const EvaluationOptions& options) {
  auto start = Clock::now();
  EvaluationReport report;
  nlohmann::json& details = report.details;
  MLCD_ASSIGN_OR_RETURN(EvalPlan plan, PlanEvaluation(options));
  const bool from_features = plan.from_features;
  EvalInputs in;
  if (from_features) {
    const bool annotated = options.annotations && !options.annotations->empty();
    MLCD_ASSIGN_OR_RETURN(
        in.train, LoadLabelledFeatures(options.train_features, options.train_labels, !annotated));
    MLCD_ASSIGN_OR_RETURN(
        in.test, LoadLabelledFeatures(options.test_features, options.test_labels, !annotated));
    Truncate(&in.train, static_cast<int64_t>(plan.train_limit));
    Truncate(&in.test, static_cast<int64_t>(plan.test_limit));
    if (annotated) {
      in.annotations.train = options.annotations->train.Prefix(in.train.features.rows);
      in.annotations.test = options.annotations->test.Prefix(in.test.features.rows);
    }
    in.model_description = "precomputed features";
  } else {
    MLCD_RETURN_IF_ERROR(EmbedSplits(options, &plan, &in));
    if (options.rank != 0) {
      details["rank"] = options.rank;
      return report;  // rank 0 evaluates
    }
  }
  const bool has_classes = !in.train.labels.empty() && !in.test.labels.empty();
  if (!has_classes && in.annotations.empty())
    return Status::FailedPrecondition("the splits have no class labels and no annotations");
  const int num_classes = std::max(NumClassesOf(in.train.labels), NumClassesOf(in.test.labels));

  v1::EvaluationResult& result = report.result;
  result.set_train_samples(static_cast<uint64_t>(in.train.features.rows));
  result.set_test_samples(static_cast<uint64_t>(in.test.features.rows));
  result.set_checkpoint(in.checkpoint_dir);
  details["model"] = in.model_description;
  details["checkpoint"] = in.checkpoint_dir;
  details["embedding_dim"] = in.train.features.cols;
  result.set_features(from_features ? "precomputed" : VitFeaturesName(plan.features));
  details["features"] = result.features();
  if (!from_features && plan.features == VitFeatures::kBlocks) {
    result.set_feature_blocks(plan.feature_blocks);
    details["feature_blocks"] = plan.feature_blocks;
  }
  details["num_classes"] = num_classes;
  details["train_samples"] = in.train.features.rows;
  details["test_samples"] = in.test.features.rows;
  details["embed_seconds"] = in.embed_seconds;

  if (!has_classes) details["single_label_skipped"] = "the splits have no class labels";
  if (plan.run_probe && has_classes)
    MLCD_RETURN_IF_ERROR(ProbeSplits(options, in, num_classes, &report));
  if (plan.run_knn && has_classes)
    MLCD_RETURN_IF_ERROR(KnnSplits(options, plan, in, num_classes, &report));
  MLCD_RETURN_IF_ERROR(EvaluateAnnotationsOf(options, plan, in, &report));
  if (!in.annotations.empty())
    report.annotations = std::make_shared<const EvalAnnotations>(in.annotations);
  MaybeMeasureFig3(options, plan, in, &report);

  result.set_seconds(SecondsSince(start));
  details["seconds"] = result.seconds();
  report.has_result = true;
  if (!options.output_dir.empty()) MLCD_RETURN_IF_ERROR(WriteOutputs(options, &in, &report));
  return report;
}

}  // namespace mlcd::worker
