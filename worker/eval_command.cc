// `mlcd-worker eval`: the evaluation of a model (worker/eval/runner.h): linear probe (CLIP
// protocol) and kNN on the labelled train/test splits, plus the paper's Fig. 3 cosines. What
// the coordinator's EVALUATING phase runs (via the worker agent) and what `mlcdctl eval`
// runs locally; docs/evaluation.md.
//
//   mlcd-worker eval --checkpoint ckpt/                                # a trained model
//   mlcd-worker eval --spec job.yaml --random-init                     # the random-ViT baseline
//   mlcd-worker eval --train-features tr.npy --test-features te.npy    # any features (+ .labels.npy)
//   mlcd-worker eval --assignment a.json --progress-jsonl p.jsonl      # EVALUATE assignment
//
// Progress events (one JSON object per line):
//   {"event":"started","rank":0,"world_size":1,"model":"..."}
//   {"event":"progress","phase":"embed train"|"embed test"|"linear probe"|"knn","rows_done":..,"rows_total":..}
//   {"event":"finished","evaluation":{<mlcd.v1.EvaluationResult>},"outputs":["<out>/evaluation.json",...]}
//   {"event":"error","message":"..."}  (then exit status 1)
#include <ATen/Parallel.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "common/blas_env.h"
#include "common/confined_file.h"
#include "common/eval_flags.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "worker/agent/assignment_paths.h"
#include "worker/command.h"
#include "worker/command_io.h"
#include "worker/eval/baselines.h"
#include "worker/eval/head_predictions.h"
#include "worker/eval/runner.h"
#include "worker/eval/stage_evaluation.h"
#include "worker/train/trainer.h"

namespace mlcd::worker {
namespace {

struct EvalFlags {
  std::string assignment;
  WorkerRootFlags data_roots;
  std::string spec;
  std::string checkpoint;
  std::vector<std::string> stage_checkpoints;
  bool random_init = false;
  std::vector<std::string> train_features, test_features, train_labels, test_labels;
  EvalSettingsFlags settings;  // --train-limit ... --feature-blocks (common/eval_flags.h)
  double knn_temperature = 0;
  int max_iterations = 1000;
  double validation_fraction = 0.2;
  std::string label_set;
  std::string labelstore;
  std::string out;
  bool keep_embeddings = false;
  bool baselines = false;
  std::string baseline_cache;
  std::string result;
  int rank = 0;
  int world_size = 1;
  std::string rendezvous;
  int64_t batch_size = 256;
  int threads = 0;
  std::string progress_jsonl;
  std::string output = "text";
  std::string log_level = "info";
};

// The assignment's fields, where the flags leave them unset.
Status ApplyAssignment(const EvalFlags& flags, const CLI::App& cmd, EvaluationOptions* o) {
  auto read = cli::ReadAssignment(flags.assignment);
  if (!read.ok()) return read.status().WithContext("--assignment");
  const v1::Assignment& a = *read;
  MLCD_RETURN_IF_ERROR(ConfineAssignmentForChild(a, flags.data_roots));
  if (a.has_spec()) {
    o->spec = a.spec();
    o->has_spec = true;
  }
  if (o->checkpoint.empty()) o->checkpoint = a.resume_checkpoint();
  if (o->stage_checkpoints.empty())
    o->stage_checkpoints.assign(a.stage_checkpoints().begin(), a.stage_checkpoints().end());
  if (o->output_dir.empty()) o->output_dir = a.output_dir();
  if (o->label_set.empty()) o->label_set = a.label_set();
  if (o->labelstore_address.empty()) o->labelstore_address = a.labelstore_address();
  if (cmd.get_option("--rank")->count() == 0) o->rank = a.rank();
  if (cmd.get_option("--world-size")->count() == 0)
    o->world_size = a.world_size() > 0 ? a.world_size() : 1;
  if (o->rendezvous.empty()) o->rendezvous = a.rendezvous_address();
  if (o->checkpoint.empty() && o->has_spec)
    return Status::InvalidArgument(
        "the EVALUATE assignment names no checkpoint (resume_checkpoint)");
  return Status::Ok();
}

// What to evaluate and how, from the flags (and the assignment or spec they name).
StatusOr<EvaluationOptions> EvaluationOptionsFrom(const EvalFlags& flags, const CLI::App& cmd) {
  EvaluationOptions o;
  o.checkpoint = flags.checkpoint;
  o.stage_checkpoints = flags.stage_checkpoints;
  o.rank = flags.rank;
  o.world_size = flags.world_size;
  o.rendezvous = flags.rendezvous;
  o.output_dir = flags.out;
  o.label_set = flags.label_set;
  o.labelstore_address = flags.labelstore;
  if (!flags.assignment.empty()) MLCD_RETURN_IF_ERROR(ApplyAssignment(flags, cmd, &o));
  if (!flags.spec.empty()) {
    auto s = LoadJobSpecFile(flags.spec);
    if (!s.ok()) return s.status().WithContext("--spec");
    o.spec = *s;
    o.has_spec = true;
  }
  o.train_features = flags.train_features;
  o.test_features = flags.test_features;
  o.train_labels = flags.train_labels;
  o.test_labels = flags.test_labels;
  const bool features = !o.train_features.empty() || !o.test_features.empty();
  if (!features && o.checkpoint.empty() && o.stage_checkpoints.empty()) {
    if (!o.has_spec)
      return Status::InvalidArgument(
          "nothing to evaluate: pass --checkpoint DIR, --train-features and "
          "--test-features, or --spec FILE --random-init");
    if (!flags.random_init)
      return Status::InvalidArgument(
          "no checkpoint given: pass --checkpoint DIR, or --random-init to evaluate "
          "a randomly initialised model of the spec");
  }
  if (flags.random_init && (!o.checkpoint.empty() || !o.stage_checkpoints.empty()))
    return Status::InvalidArgument("--random-init and a checkpoint exclude each other");
  o.train_limit = flags.settings.train_limit;
  o.test_limit = flags.settings.test_limit;
  if (flags.settings.no_probe) o.run_probe = 0;
  if (flags.settings.no_knn) o.run_knn = 0;
  if (flags.settings.no_multi_label) o.run_multi_label = 0;
  if (flags.settings.no_attributes) o.run_attributes = 0;
  o.knn_k = flags.settings.knn_k;
  o.knn_temperature = flags.knn_temperature;
  o.features = flags.settings.features;
  o.feature_blocks = flags.settings.feature_blocks;
  o.probe.fixed_lambda = flags.settings.lambda;
  o.probe.solver.max_iterations = flags.max_iterations;
  o.probe.validation_fraction = flags.validation_fraction;
  o.batch_size = flags.batch_size;
  o.keep_embeddings = flags.keep_embeddings;
  // A checkpoint with a label head (bce, mulcon) also scores the head's own predictions.
  if (o.run_multi_label) {
    o.predict_test_labels = [batch = flags.batch_size](const EmbeddingModel& model,
                                                       const ImageDataset& test) {
      return PredictTestLabels(model, test, batch);
    };
  }
  return o;
}

// Threads: --threads; else, in a gang, training.threads_per_worker (the ranks share the
// machines like a training gang); else all cores (one evaluation process runs alone).
// Also sets the collective timeout from the spec.
void ChooseThreads(const EvalFlags& flags, EvaluationOptions* o) {
  int threads = flags.threads;
  if (o->has_spec) {
    v1::JobSpec defaulted = o->spec;
    ApplyJobSpecDefaults(&defaulted);
    o->collective_timeout = std::chrono::seconds(defaulted.training().collective_timeout_seconds());
    if (threads <= 0 && o->world_size > 1) threads = defaulted.training().threads_per_worker();
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  SetBlasThreads(threads);  // OpenBLAS keeps its own pool (common/blas_env.h)
}

// Baselines (worker/eval/baselines.h): --baselines, or a job's EVALUATE assignment whose spec
// keeps evaluation.baselines on; never for a random-init evaluation (it is one).
bool WantBaselines(const EvalFlags& flags, const EvaluationOptions& o) {
  if (o.checkpoint.empty()) return false;
  if (flags.baselines) return true;
  if (flags.assignment.empty() || !o.has_spec) return false;
  v1::JobSpec spec = o.spec;
  ApplyJobSpecDefaults(&spec);
  return spec.evaluation().baselines();
}

// --baseline-cache, else the assignment's cache directory (the coordinator's).
std::string BaselineCacheDir(const EvalFlags& flags) {
  if (!flags.baseline_cache.empty() || flags.assignment.empty()) return flags.baseline_cache;
  auto read = cli::ReadAssignment(flags.assignment);
  return read.ok() ? read->baseline_cache_dir() : std::string();
}

// One line of multi-label metrics (docs/evaluation.md, "Multi-label protocol").
void PrintMultiLabel(const char* what, const v1::MultiLabelMetrics& m) {
  std::printf(
      "%-13s mAP %.2f%%, Hamming %.2f%%, example-F1 %.2f%%, macro-F1 %.2f%%, micro-F1 %.2f%%, "
      "P@1 %.2f%% (%d labels, %d with test positives, threshold %g)\n",
      what, 100 * m.mean_average_precision(), 100 * m.hamming_accuracy(), 100 * m.example_f1(),
      100 * m.macro_f1(), 100 * m.micro_f1(), 100 * m.precision_at_1(), m.num_labels(),
      m.labels_scored(), m.threshold());
}

// The result as a person reads it (text) or as one JSON document.
void PrintEvaluation(const EvalFlags& flags, const EvaluationReport& report,
                     const nlohmann::json& evaluation) {
  const v1::EvaluationResult& r = report.result;
  if (flags.output == "json") {
    nlohmann::json j = {{"evaluation", evaluation}, {"details", report.details}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const auto& d = report.details;
  std::printf("model         %s\n", d.value("model", "").c_str());
  std::printf("samples       %llu train, %llu test, embedding dim %d\n",
              static_cast<unsigned long long>(r.train_samples()),
              static_cast<unsigned long long>(r.test_samples()), d.value("embedding_dim", 0));
  if (d.contains("linear_probe")) {
    const auto& p = d["linear_probe"];
    std::printf(
        "linear probe  %.2f%% test accuracy (lambda %g chosen on %lld validation images, %zu "
        "fits, %.1f s)\n",
        100 * r.linear_probe_accuracy(), r.linear_probe_lambda(),
        static_cast<long long>(p.value("validation_samples", 0)), p["trials"].size(),
        p.value("seconds", 0.0));
  }
  if (d.contains("knn"))
    std::printf("kNN           %.2f%% (k %d, T %g, %.1f s)\n", 100 * r.knn_accuracy(),
                d["knn"].value("k", 0), d["knn"].value("temperature", 0.0),
                d["knn"].value("seconds", 0.0));
  if (d.contains("fig3"))
    std::printf("cosines       mean positive %.4f, mean negative %.4f (paper Fig. 3)\n",
                r.mean_positive_cosine(), r.mean_negative_cosine());
  if (r.has_multi_label()) PrintMultiLabel("multi-label", r.multi_label());
  if (r.has_model_predictions()) PrintMultiLabel("predictions", r.model_predictions());
  for (const auto& a : r.attributes())
    std::printf("attribute     %-12s linear probe %.2f%% (%d classes, lambda %g)\n",
                a.name().c_str(), 100 * a.linear_probe_accuracy(), a.num_classes(),
                a.linear_probe_lambda());
  for (const auto& b : r.baselines()) {
    std::printf("baseline      %-12s linear probe %.2f%%, kNN %.2f%%%s\n", b.name().c_str(),
                100 * b.linear_probe_accuracy(), 100 * b.knn_accuracy(),
                b.cached() ? " (cached)" : "");
    if (b.has_multi_label()) PrintMultiLabel("  multi-label", b.multi_label());
    for (const auto& a : b.attributes())
      std::printf("  attribute   %-12s linear probe %.2f%%\n", a.name().c_str(),
                  100 * a.linear_probe_accuracy());
  }
  if (!report.outputs.empty()) std::printf("written       %s\n", report.outputs[0].c_str());
  std::printf("time          %.1f s\n", r.seconds());
}

int RunEval(const EvalFlags& flags, const CLI::App& cmd) {
  cli::JsonLines progress;
  auto fail = [&progress](const Status& st) { return progress.Fail(st); };
  if (!cli::ApplyLogLevelFlag(flags.log_level)) return 2;
  if (flags.output != "text" && flags.output != "json") {
    std::cerr << "--output must be text or json\n";
    return 2;
  }
  Status st = progress.Open(flags.progress_jsonl);
  if (!st.ok()) return fail(st);
  auto options = EvaluationOptionsFrom(flags, cmd);
  if (!options.ok()) return fail(options.status());
  EvaluationOptions& o = *options;
  const bool features = !o.train_features.empty() || !o.test_features.empty();
  ChooseThreads(flags, &o);
  SetLogComponent("eval r" + std::to_string(o.rank));
  o.on_event = [&progress](const nlohmann::json& e) { progress.Write(e); };
  progress.Write({{"event", "started"},
                  {"rank", o.rank},
                  {"world_size", o.world_size},
                  {"model", features ? "precomputed features"
                                     : (o.checkpoint.empty() ? "random init" : o.checkpoint)}});

  auto report = o.stage_checkpoints.empty() ? RunEvaluation(o) : RunStageEvaluation(o);
  if (!report.ok()) return fail(report.status());
  if (report->has_result && !features && WantBaselines(flags, o)) {
    // Rank 0 runs the baselines alone: the gang's other ranks are done, so on a machine the
    // gang shares (W x threads fit its cores) their cores are free. The job's result is kept
    // when a baseline fails (logged, and in the details).
    const int threads = at::get_num_threads() * o.world_size;
    if (o.world_size > 1 && threads <= static_cast<int>(std::thread::hardware_concurrency())) {
      at::set_num_threads(threads);
      SetBlasThreads(threads);
    }
    auto baselines = RunBaselines(o, BaselineCacheDir(flags));
    if (baselines.ok()) {
      for (const auto& b : *baselines) *report->result.add_baselines() = b;
    } else {
      MLCD_LOG(WARNING) << "baselines skipped: " << baselines.status().ToString();
      report->details["baselines_error"] = baselines.status().ToString();
    }
    if (!o.output_dir.empty()) {
      st = WriteResultFiles(o.output_dir, &*report);
      if (!st.ok()) return fail(st.WithContext("writing the result with its baselines"));
    }
  }
  nlohmann::json done = {{"event", "finished"}};
  if (report->has_result) {
    done["evaluation"] = cli::MessageToJsonObject(report->result);
    done["outputs"] = report->outputs;
    if (!flags.result.empty() && flags.result != "-") {
      st = WriteConfinedFile(flags.result, report->details.dump(2) + "\n");
      if (!st.ok()) return fail(st.WithContext("--result"));
    }
    if (!progress.to_stdout()) PrintEvaluation(flags, *report, done["evaluation"]);
  }
  progress.Write(done);
  return 0;
}

CommandRegistration eval_registration(40, [](CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<EvalFlags>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Evaluate a model: embed the labelled train and test splits, fit a linear probe (CLIP "
      "protocol:\n"
      "L-BFGS logistic regression, lambda searched on a validation split of train, refit on "
      "train+val,\n"
      "scored on test) and run kNN (cosine, k 20, weights exp(s/0.07)); also the mean positive /\n"
      "negative cosine of the final model (paper Fig. 3). Prints the result and writes "
      "evaluation.json.");
  cmd->add_option(
      "--assignment", flags->assignment,
      "protobuf JSON of an mlcd.v1.Assignment (EVALUATE): spec, resume_checkpoint, output_dir, "
      "label set and label store; explicit flags override it");
  AddWorkerDataRootFlag(*cmd, &flags->data_roots,
                        "none: paths are not confined (the agent passes its own roots)");
  cmd->add_option(
      "--spec", flags->spec,
      "job spec (YAML, or .json protobuf JSON): evaluation dataset and settings, and the model for "
      "--random-init (default: the checkpoint's spec)");
  cmd->add_option("--checkpoint", flags->checkpoint,
                  "checkpoint directory, or a checkpoint root with LATEST");
  cmd->add_option("--stage-checkpoint", flags->stage_checkpoints,
                  "MCL: a stage's checkpoint, once per stage in stage order: scores every stage "
                  "alone and their concatenation (docs/mcl.md)");
  cmd->add_flag(
      "--random-init", flags->random_init,
      "evaluate the spec's model as initialised before training (the random-ViT baseline)");
  cmd->add_option(
         "--train-features", flags->train_features,
         "evaluate precomputed train features instead of a model (.npy files or shard directories)")
      ->expected(1, 1 << 20);
  cmd->add_option("--test-features", flags->test_features, "precomputed test features")
      ->expected(1, 1 << 20);
  cmd->add_option(
         "--train-labels", flags->train_labels,
         "class labels of the train features (default: <shard>.labels.npy beside each shard)")
      ->expected(1, 1 << 20);
  cmd->add_option("--test-labels", flags->test_labels, "class labels of the test features")
      ->expected(1, 1 << 20);
  AddEvalSettingsFlags(cmd, &flags->settings);
  cmd->add_option("--knn-temperature", flags->knn_temperature, "vote temperature (default: 0.07)");
  cmd->add_option("--max-iterations", flags->max_iterations, "L-BFGS iteration cap per fit")
      ->capture_default_str();
  cmd->add_option("--validation-fraction", flags->validation_fraction,
                  "share of the train split held out for the lambda search")
      ->capture_default_str();
  cmd->add_option("--label-set", flags->label_set,
                  "label set for the Fig. 3 cosines (default: the checkpoint's)");
  cmd->add_option("--labelstore", flags->labelstore,
                  "mlcd-labelstore address for the Fig. 3 cosines (not given: they are skipped)");
  cmd->add_option("--out", flags->out, "write evaluation.json and evaluation-details.json here");
  cmd->add_flag("--keep-embeddings", flags->keep_embeddings,
                "also write the embedded splits under --out");
  cmd->add_flag("--baselines", flags->baselines,
                "also score a randomly initialised model of the same shape and the raw pixels "
                "on the same splits (a job's evaluation does unless evaluation.baselines is "
                "false)");
  cmd->add_option("--baseline-cache", flags->baseline_cache,
                  "directory caching the baselines' results (default: the assignment's; "
                  "none for --baselines alone)");
  cmd->add_option("--result", flags->result,
                  "also write the details (trials, timings) as JSON to this file");
  cmd->add_option("--rank", flags->rank, "rank in an evaluation gang")->envname("MLCD_RANK");
  cmd->add_option("--world-size", flags->world_size,
                  "gang size (ranks embed parts, rank 0 evaluates)")
      ->envname("MLCD_WORLD_SIZE");
  cmd->add_option("--rendezvous", flags->rendezvous, "HOST:PORT of rank 0's c10d TCPStore")
      ->envname("MLCD_RENDEZVOUS");
  cmd->add_option("--batch-size", flags->batch_size, "images per forward pass")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads,
                  "intra-op threads (default: all cores; in a gang, training.threads_per_worker)");
  cli::AddProgressJsonlFlag(cmd, &flags->progress_jsonl);
  cmd->add_option("--output", flags->output, "result on stdout: text | json")
      ->capture_default_str();
  cli::AddLogLevelFlag(cmd, &flags->log_level);
  cli::AddChildMaxDecodeMemoryFlag(cmd);
  cmd->callback([flags, cmd, exit_code] { *exit_code = RunEval(*flags, *cmd); });
});

}  // namespace
}  // namespace mlcd::worker
