// mlcdctl eval: the evaluation of a checkpoint or of a job (docs/evaluation.md).
//
//   mlcdctl eval --checkpoint DIR [--spec job.yaml] [--test-limit N] ...
//       runs the evaluation on this machine: `mlcd-worker eval` (the binary next to mlcdctl,
//       or --worker-binary / $MLCD_WORKER_BINARY) as a child process, with a progress display,
//       then prints the result (mlcd.v1.EvaluationResult; JSON with --output json).
//   mlcdctl eval --job ID
//       prints the evaluation the job's EVALUATING phase stored with it (also shown by
//       `mlcdctl get`). With --rerun (or when the job has none yet but has a checkpoint) it
//       evaluates the job's latest checkpoint here with the job's spec, as above; that result is
//       printed, not stored with the job.
// mlcdctl itself has no tensor code: all of the work happens in mlcd-worker.
#include <unistd.h>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/evaluation_table.h"
#include "client/worker_process.h"
#include "clients/coordinator_client.h"
#include "common/eval_flags.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/job_spec.h"
#include "common/subprocess.h"
#include "mlcd/v1/coordinator.grpc.pb.h"

namespace mlcd::cli {
namespace {

struct EvalOptions {
  std::string checkpoint;
  std::string job;
  bool rerun = false;
  std::string spec;
  EvalSettingsFlags settings;  // forwarded to mlcd-worker eval (common/eval_flags.h)
  std::string out;
  int threads = 0;
  std::string worker_binary;
  bool verbose = false;
};

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  o.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void PrintResult(const Context& ctx, const v1::EvaluationResult& e, const std::string& source) {
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(e).c_str());
    return;
  }
  std::printf("evaluation of %s\n", source.c_str());
  if (HasSingleLabelResult(e)) {
    std::printf("  linear probe  %.2f%% (lambda %g)\n", 100 * e.linear_probe_accuracy(),
                e.linear_probe_lambda());
    std::printf("  kNN           %.2f%%\n", 100 * e.knn_accuracy());
  }
  std::printf("  samples       %llu train, %llu test\n",
              static_cast<unsigned long long>(e.train_samples()),
              static_cast<unsigned long long>(e.test_samples()));
  if (e.mean_positive_cosine() != 0 || e.mean_negative_cosine() != 0)
    std::printf("  cosines       positive %.4f, negative %.4f (paper Fig. 3)\n",
                e.mean_positive_cosine(), e.mean_negative_cosine());
  if (e.baselines_size() > 0) std::printf("%s", EvaluationTable(e, "  ").c_str());
  std::printf("%s", AnnotationTables(e, "  ").c_str());
  if (!e.checkpoint().empty()) std::printf("  checkpoint    %s\n", e.checkpoint().c_str());
  std::printf("  time          %s\n", FormatDuration(e.seconds()).c_str());
}

// Runs `mlcd-worker eval` (client/worker_process.h) with a progress bar; its log goes to
// `log_path` (or our stderr with --verbose). Returns the result from the "finished" event.
StatusOr<v1::EvaluationResult> RunWorkerEval(const EvalOptions& o,
                                             const std::vector<std::string>& args,
                                             const std::string& log_path) {
  ProgressDisplay display("eval");
  WorkerRun run;
  run.binary = WorkerBinary(o.worker_binary);
  run.command = "eval";
  run.args = args;
  if (!o.verbose) run.log_path = log_path;
  run.on_event = [&display](const nlohmann::json& j) {
    if (j.value("event", "") != "progress") return;
    double done = j.value("rows_done", 0.0), total = j.value("rows_total", 0.0);
    std::string phase = j.value("phase", "");
    std::string detail = phase + " " + std::to_string(static_cast<long long>(done)) + "/" +
                         std::to_string(static_cast<long long>(total));
    if (j.contains("validation_accuracy"))
      detail = phase + ": lambda " + std::to_string(j.value("lambda", 0.0)) + " -> validation " +
               std::to_string(100 * j.value("validation_accuracy", 0.0)) + "%";
    display.Update(total > 0 ? done / total : -1, detail);
  };
  StatusOr<nlohmann::json> finished = RunWorkerCommand(run);
  v1::EvaluationResult result;
  bool have_result = false;
  if (finished.ok() && finished->contains("evaluation")) {
    google::protobuf::util::JsonParseOptions po;
    po.ignore_unknown_fields = true;
    have_result =
        google::protobuf::util::JsonStringToMessage((*finished)["evaluation"].dump(), &result, po)
            .ok();
  }
  display.Finish(have_result ? "done" : "failed");
  if (!finished.ok()) return finished.status();
  if (!have_result) return Status::Internal("mlcd-worker eval finished without an evaluation");
  return result;
}

int RunEval(Context& ctx, const EvalOptions& o) {
  if (o.checkpoint.empty() == o.job.empty())
    return ctx.Fail(Status::InvalidArgument("give exactly one of --checkpoint DIR or --job ID"));
  std::vector<std::string> args;
  std::string source;
  std::string tmp_dir;
  if (!o.job.empty()) {
    auto stub = coordinator::NewCoordinatorStub(ctx.coordinator);
    grpc::ClientContext context;
    context.set_deadline(ctx.Deadline());
    v1::GetJobRequest request;
    request.set_id(o.job);
    v1::Job job;
    grpc::Status s = stub->GetJob(&context, request, &job);
    if (!s.ok()) return ctx.Fail(FromGrpcStatus(s).WithContext("coordinator " + ctx.coordinator));
    if (job.has_evaluation() && !o.rerun) {
      PrintResult(ctx, job.evaluation(), "job " + job.id() + " (stored by its EVALUATING phase)");
      return kExitOk;
    }
    if (job.checkpoint().empty())
      return ctx.Fail(Status::FailedPrecondition(
          "job " + job.id() + " has no evaluation and no checkpoint yet (state " +
          v1::JobState_Name(job.state()) + "); wait for it to train"));
    source = "job " + job.id() + " checkpoint " + job.checkpoint();
    char templ[] = "/tmp/mlcdctl-eval-XXXXXX";
    if (!::mkdtemp(templ)) return ctx.Fail(Status::Internal("cannot create a temporary directory"));
    tmp_dir = templ;
    std::string spec_json;
    google::protobuf::util::JsonPrintOptions po;
    po.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(job.spec(), &spec_json, po);
    Status w = WriteFileAtomically(tmp_dir + "/spec.json", spec_json);
    if (!w.ok()) return ctx.Fail(w);
    args = {"--checkpoint", job.checkpoint(), "--spec", tmp_dir + "/spec.json"};
    if (!job.label_set().empty()) args.insert(args.end(), {"--label-set", job.label_set()});
  } else {
    if (!PathExists(o.checkpoint))
      return ctx.Fail(Status::NotFound(o.checkpoint + ": no such checkpoint"));
    source = "checkpoint " + o.checkpoint;
    args = {"--checkpoint", o.checkpoint};
    if (!o.spec.empty()) args.insert(args.end(), {"--spec", o.spec});
  }
  if (!ctx.labelstore.empty()) args.insert(args.end(), {"--labelstore", ctx.labelstore});
  const std::vector<std::string> settings = EvalSettingsArgs(o.settings);
  args.insert(args.end(), settings.begin(), settings.end());
  if (o.threads > 0) args.insert(args.end(), {"--threads", std::to_string(o.threads)});
  std::string out = o.out;
  if (out.empty()) {
    if (tmp_dir.empty()) {
      char templ[] = "/tmp/mlcdctl-eval-XXXXXX";
      if (!::mkdtemp(templ))
        return ctx.Fail(Status::Internal("cannot create a temporary directory"));
      tmp_dir = templ;
    }
    out = tmp_dir;
  }
  args.insert(args.end(), {"--out", out});
  Status made = MakeDirs(out);
  if (!made.ok()) return ctx.Fail(made);
  auto result = RunWorkerEval(o, args, out + "/eval.log");
  if (!result.ok()) return ctx.Fail(result.status());
  PrintResult(ctx, *result, source);
  if (ctx.format() == OutputFormat::kText)
    std::printf("  written       %s/evaluation.json\n", out.c_str());
  return kExitOk;
}

CommandRegistration reg(60, [](CLI::App& app, Context& ctx) {
  auto o = std::make_shared<EvalOptions>();
  auto* cmd = app.add_subcommand(
      "eval",
      "Evaluate a checkpoint or a job: linear probe (CLIP protocol: L-BFGS logistic regression on\n"
      "frozen L2-normalised embeddings, lambda searched on a validation split of train, refit on\n"
      "train+val, scored on test) and kNN (k 20, cosine, weights exp(s/0.07)).\n"
      "  mlcdctl eval --checkpoint /data/jobs/<id>/ckpt     runs mlcd-worker eval on this machine\n"
      "  mlcdctl eval --job <id>                            the result stored by the job's "
      "EVALUATING phase\n"
      "  mlcdctl eval --job <id> --rerun                    re-evaluates the job's checkpoint "
      "here");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, or a checkpoint root with LATEST");
  cmd->add_option("--job", o->job, "job id (coordinator from --coordinator / MLCD_COORDINATOR)");
  cmd->add_flag("--rerun", o->rerun,
                "with --job: evaluate the job's checkpoint here even if it has a result");
  cmd->add_option("--spec", o->spec,
                  "with --checkpoint: job spec for the evaluation dataset and settings (default: "
                  "the checkpoint's)");
  AddEvalSettingsFlags(cmd, &o->settings);
  cmd->add_option("--out", o->out,
                  "keep evaluation.json, evaluation-details.json and the log here");
  cmd->add_option("--threads", o->threads, "threads of the evaluation (default: all cores)");
  cmd->add_option(
      "--worker-binary", o->worker_binary,
      "mlcd-worker executable (default: $MLCD_WORKER_BINARY, else the one next to mlcdctl)");
  cmd->add_flag("--verbose,-v", o->verbose, "show the worker's log instead of keeping it in --out");
  cmd->callback([&ctx, o] { ctx.exit_code = RunEval(ctx, *o); });
});

}  // namespace
}  // namespace mlcd::cli
