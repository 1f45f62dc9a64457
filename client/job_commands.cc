// mlcdctl job commands: submit, get, list, cancel, watch, workers (mlcd.v1.Coordinator).
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <ctime>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "client/cli.h"
#include "client/evaluation_table.h"
#include "clients/coordinator_client.h"
#include "common/file_util.h"
#include "common/format.h"
#include "common/grpc_server.h"
#include "mlcd/v1/coordinator.grpc.pb.h"

namespace mlcd::cli {
namespace {

// Text from the coordinator that users and data chose (job names, messages, paths, worker
// names), for a terminal: control characters escaped. JSON output needs no such
// step: its strings escape them already.
std::string Shown(const std::string& text) { return EscapeControlChars(text); }

std::string ToJson(const google::protobuf::Message& message, bool multiline) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = multiline;
  options.always_print_primitive_fields = false;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  return name.rfind("JOB_STATE_", 0) == 0 ? name.substr(10) : name;
}

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

int ExitCodeForJob(const v1::Job& job) {
  switch (job.state()) {
    case v1::JOB_STATE_FAILED:
      return kExitJobFailed;
    case v1::JOB_STATE_CANCELLED:
      return kExitJobCancelled;
    default:
      return kExitOk;
  }
}

std::string TimeOfDay(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  char ms[8];
  std::snprintf(ms, sizeof(ms), ".%03d", static_cast<int>(unix_ms % 1000));
  return std::string(buf) + ms;
}

std::string Age(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return FormatDuration(std::max<int64_t>(0, now - unix_ms) / 1000.0);
}

// "round 1/1 epoch 2/2 step 3/10 loss 4.1234 512 samples/s ETA 12.0 s" (1-based for people).
std::string ProgressLine(const v1::Job& job) {
  const auto& p = job.progress();
  std::ostringstream out;
  if (job.state() == v1::JOB_STATE_TRAINING && (p.total_steps() > 0 || p.step() > 0)) {
    out << "round " << p.round() + 1 << "/" << std::max(1, p.rounds()) << "  epoch "
        << p.epoch() + 1 << "/" << std::max(1, p.epochs_per_round()) << "  step " << p.step();
    if (p.steps_per_epoch() > 0) out << "/" << p.steps_per_epoch();
    out << "  loss " << Fixed(p.loss(), 4) << "  " << Fixed(p.samples_per_second(), 0)
        << " samples/s";
    if (p.eta_seconds() > 0) out << "  ETA " << FormatDuration(p.eta_seconds());
  } else if (!p.detail().empty()) {
    out << p.detail();
  } else {
    out << job.message();
  }
  return out.str();
}

double ProgressFraction(const v1::Job& job) {
  const auto& p = job.progress();
  if (job.state() == v1::JOB_STATE_TRAINING && p.job_total_steps() > 0) {
    return static_cast<double>(p.total_steps()) / static_cast<double>(p.job_total_steps());
  }
  if (job.state() == v1::JOB_STATE_SUCCEEDED) return 1.0;
  return -1;
}

std::unique_ptr<v1::Coordinator::Stub> Stub(const Context& ctx) {
  return coordinator::NewCoordinatorStub(ctx.coordinator);
}

Status Call(const Context& ctx, const std::function<grpc::Status(grpc::ClientContext*)>& fn) {
  grpc::ClientContext context;
  context.set_deadline(ctx.Deadline());
  Status s = FromGrpcStatus(fn(&context));
  if (s.code() == StatusCode::kUnavailable) {
    return Status::Unavailable(
        "cannot reach the coordinator at " + ctx.coordinator + " (" + s.message() +
        "); is it running? (`mlcdctl local up`, or set --coordinator / MLCD_COORDINATOR)");
  }
  return s;
}

void PrintJobText(const v1::Job& job) {
  const auto& p = job.progress();
  std::printf(
      "job         %s%s\n", Shown(job.id()).c_str(),
      job.metadata().name().empty() ? "" : (" (" + Shown(job.metadata().name()) + ")").c_str());
  std::printf("state       %s\n", StateName(job.state()).c_str());
  if (!job.message().empty()) std::printf("message     %s\n", Shown(job.message()).c_str());
  if (!IsTerminal(job.state())) std::printf("progress    %s\n", Shown(ProgressLine(job)).c_str());
  std::printf("steps       %lld", static_cast<long long>(p.total_steps()));
  if (p.job_total_steps() > 0) std::printf(" of %lld", static_cast<long long>(p.job_total_steps()));
  std::printf(" optimizer steps; round %d/%d\n", p.round() + 1, std::max(1, p.rounds()));
  const auto& t = job.spec().training();
  std::printf("gang        world size %d, %d attempts, %d restarts (max %d)\n", t.world_size(),
              job.attempts(), job.restarts(), t.max_restarts());
  if (!job.label_set().empty()) std::printf("label set   %s\n", Shown(job.label_set()).c_str());
  if (!job.checkpoint().empty()) std::printf("checkpoint  %s\n", Shown(job.checkpoint()).c_str());
  if (!job.tensorboard_dir().empty())
    std::printf("tensorboard %s\n", Shown(job.tensorboard_dir()).c_str());
  std::printf("created     %s (%s ago)\n", TimeOfDay(job.created_unix_ms()).c_str(),
              Age(job.created_unix_ms()).c_str());
  if (job.first_step_unix_ms() > 0) {
    std::printf("first step  %s (%.1f s after submission)\n",
                TimeOfDay(job.first_step_unix_ms()).c_str(),
                (job.first_step_unix_ms() - job.created_unix_ms()) / 1000.0);
  }
  if (job.finished_unix_ms() > 0) {
    std::printf("finished    %s (took %s)\n", TimeOfDay(job.finished_unix_ms()).c_str(),
                FormatDuration((job.finished_unix_ms() - job.created_unix_ms()) / 1000.0).c_str());
  }
  for (const auto& r : job.rounds()) {
    std::printf("round %d\n", r.round() + 1);
    if (!r.feature_source().empty())
      std::printf("  features  %s\n", Shown(r.feature_source()).c_str());
    if (r.clustered()) {
      std::printf("  k-means   %llu points -> %d centres (d %d), objective %.1f, %.1f s",
                  static_cast<unsigned long long>(r.cluster().num_points()), r.cluster().k(),
                  r.cluster().d(), r.cluster().final_objective(), r.cluster().seconds());
      // The sizes come from the assignment pass (CLUSTERING skips its own).
      if (r.cluster().has_sizes()) {
        std::printf(", sizes %llu..%llu",
                    static_cast<unsigned long long>(r.cluster().sizes().min()),
                    static_cast<unsigned long long>(r.cluster().sizes().max()));
      }
      std::printf("\n");
    }
    if (r.assigned()) {
      std::printf("  labels    %s: %llu samples x %d labels, %.1f s", Shown(r.label_set()).c_str(),
                  static_cast<unsigned long long>(r.assign().num_samples()), r.assign().l(),
                  r.assign().seconds());
      if (r.assign().has_quality()) {
        std::printf("; true class in top-1 / top-l clusters %.1f%% / %.1f%%, NMI %.3f",
                    100 * r.assign().quality().top1_recall(),
                    100 * r.assign().quality().topl_recall(), r.assign().quality().nmi());
      }
      std::printf("\n");
    } else if (!r.label_set().empty() && !job.spec().clustering().label_set().empty()) {
      std::printf("  labels    %s (given: clustering.label_set)\n", Shown(r.label_set()).c_str());
    }
    if (r.bad_samples().count() > 0) {
      std::string keys;
      for (const auto& k : r.bad_samples().first_keys()) keys += (keys.empty() ? "" : ", ") + Shown(k);
      std::printf("  bad       %lld images skipped as unreadable (first: %s)\n",
                  static_cast<long long>(r.bad_samples().count()), keys.c_str());
    }
    std::printf("  epochs    %d/%d committed%s\n", r.epochs_committed(),
                r.round_epochs() > 0 ? r.round_epochs() : t.epochs_per_round(),
                r.trained() ? " (round trained)" : "");
    if (t.time_budget_minutes() > 0) {
      if (r.round_steps() > 0) {
        std::printf("  budget    %s min: %lld steps fixed by the first measurement (%d epochs%s)\n",
                    Fixed(t.time_budget_minutes(), 1).c_str(),
                    static_cast<long long>(r.round_steps()), r.round_epochs(),
                    p.steps_per_epoch() > 0 && r.round_steps() % p.steps_per_epoch() != 0
                        ? ", the last one partial"
                        : "");
      } else {
        std::printf("  budget    %s min: step count not measured yet\n",
                    Fixed(t.time_budget_minutes(), 1).c_str());
      }
    }
  }
  if (job.has_evaluation()) {
    const auto& e = job.evaluation();
    if (HasSingleLabelResult(e)) {
      std::printf("evaluation  linear probe %.2f%% (lambda %g), kNN %.2f%% on %llu test images%s\n",
                  100 * e.linear_probe_accuracy(), e.linear_probe_lambda(),
                  100 * e.knn_accuracy(), static_cast<unsigned long long>(e.test_samples()),
                  e.features().empty() ? "" : (", " + Shown(e.features()) + " features").c_str());
    } else {
      std::printf("evaluation  %llu test images without classes%s\n",
                  static_cast<unsigned long long>(e.test_samples()),
                  e.features().empty() ? "" : (", " + Shown(e.features()) + " features").c_str());
    }
    if (e.mean_positive_cosine() != 0 || e.mean_negative_cosine() != 0)
      std::printf(
          "            mean cosine to positive / negative centres %.4f / %.4f (paper Fig. 3)\n",
          e.mean_positive_cosine(), e.mean_negative_cosine());
    if (e.baselines_size() > 0) std::printf("%s", EvaluationTable(e, "            ").c_str());
    std::printf("%s", AnnotationTables(e, "            ").c_str());
  }
  if (!job.phase_seconds().empty()) {
    std::printf("phases     ");
    for (const char* s :
         {"PENDING", "CLUSTERING", "ASSIGNING", "TRAINING", "EXTRACTING", "EVALUATING"}) {
      auto it = job.phase_seconds().find(s);
      if (it != job.phase_seconds().end())
        std::printf(" %s %s", s, FormatDuration(it->second).c_str());
    }
    std::printf("\n");
  }
  if (job.history_size()) {
    std::printf("history\n");
    for (const auto& h : job.history()) {
      std::printf("  %4lld %s %-20s %-10s %s\n", static_cast<long long>(h.seq()),
                  TimeOfDay(h.unix_ms()).c_str(), Shown(h.kind()).c_str(),
                  StateName(h.state()).c_str(), Shown(h.message()).c_str());
    }
  }
}

// Follows job `id` through WatchJob until it ends: `on_event` gets every event, `on_lost`
// each break of the stream (it reconnects for up to `reconnect_seconds`, e.g. across a
// coordinator restart). Returns the job as it ended. Ctrl-C or SIGTERM stops following and
// returns CANCELLED; the job itself keeps running.
StatusOr<v1::Job> FollowJob(const Context& ctx, const std::string& id, double reconnect_seconds,
                            const std::function<void(const v1::JobEvent&)>& on_event,
                            const std::function<void(const Status&)>& on_lost) {
  InterruptGuard interrupt;
  const Status interrupted = Status::Cancelled(
      "interrupted: stopped watching job " + id + "; the job keeps running (`mlcdctl watch " + id +
      "` follows it again, `mlcdctl cancel " + id + "` stops it)");
  auto stub = Stub(ctx);
  auto lost_since = std::chrono::steady_clock::now();
  bool lost = false;
  while (true) {
    Status s;
    bool got_any = false;
    {
      grpc::ClientContext context;
      InterruptGuard::Cancel cancel_on_interrupt(&interrupt, [&context] { context.TryCancel(); });
      v1::WatchJobRequest request;
      request.set_id(id);
      auto reader = stub->WatchJob(&context, request);
      v1::JobEvent event;
      while (reader->Read(&event)) {
        got_any = true;
        lost = false;
        on_event(event);
        if (IsTerminal(event.job().state())) {
          context.TryCancel();
          return event.job();
        }
      }
      s = FromGrpcStatus(reader->Finish());
    }
    if (interrupt.interrupted()) return interrupted;
    const bool retryable = s.code() == StatusCode::kUnavailable || (s.ok() && got_any);
    if (!retryable) {
      if (s.ok()) s = Status::Unavailable("the watch stream ended before the job did");
      if (s.code() == StatusCode::kUnavailable) {
        s = Status::Unavailable("cannot reach the coordinator at " + ctx.coordinator + ": " +
                                s.message());
      }
      return s;
    }
    if (!lost) {
      lost = true;
      lost_since = std::chrono::steady_clock::now();
      on_lost(s);
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - lost_since).count() >
        reconnect_seconds) {
      return Status::Unavailable("lost the coordinator at " + ctx.coordinator + " for more than " +
                                 Fixed(reconnect_seconds, 0) + " s: " + s.message());
    }
    if (interrupt.WaitFor(std::chrono::milliseconds(500))) return interrupted;
  }
}

// Exit code of a FollowJob that did not see the job end: 7 (and no "error:") when the user
// interrupted it.
int FollowFailed(const Context& ctx, const Status& status) {
  if (status.code() != StatusCode::kCancelled) return ctx.Fail(status);
  std::fprintf(stderr, "%s\n", Shown(status.message()).c_str());
  return kExitCancelled;
}

// `mlcdctl watch`: progress bar or lines, or JSON events. Returns the exit code.
int Watch(const Context& ctx, const std::string& id, double reconnect_seconds) {
  const bool json = ctx.format() == OutputFormat::kJson;
  std::unique_ptr<ProgressDisplay> display;
  if (!json) display = std::make_unique<ProgressDisplay>("job " + id, std::chrono::seconds(5));
  v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
  std::string last_message;
  auto on_event = [&](const v1::JobEvent& event) {
    const v1::Job& job = event.job();
    if (json) {
      std::printf("%s\n", ToJson(event, false).c_str());
      std::fflush(stdout);
      return;
    }
    if (job.state() != last_state || job.message() != last_message) {
      if (job.state() != last_state) {
        display->Line("[" + TimeOfDay(event.unix_ms()).substr(11) + "] " + StateName(job.state()) +
                      (job.message().empty() ? "" : ": " + job.message()));
      } else if (!job.message().empty()) {
        display->Line("[" + TimeOfDay(event.unix_ms()).substr(11) + "] " + job.message());
      }
      last_state = job.state();
      last_message = job.message();
    }
    if (!IsTerminal(job.state())) display->Update(ProgressFraction(job), ProgressLine(job));
  };
  auto on_lost = [&](const Status& s) {
    if (!json)
      display->Line("connection to the coordinator lost (" + s.message() + "); reconnecting");
  };
  auto ended = FollowJob(ctx, id, reconnect_seconds, on_event, on_lost);
  if (!ended.ok()) {
    display.reset();  // ends the bar's line before the message
    return FollowFailed(ctx, ended.status());
  }
  const v1::Job& job = *ended;
  if (!json) {
    std::string summary = StateName(job.state());
    if (job.state() == v1::JOB_STATE_SUCCEEDED) {
      summary += " after " +
                 FormatDuration((job.finished_unix_ms() - job.created_unix_ms()) / 1000.0) + ", " +
                 std::to_string(job.progress().total_steps()) + " optimizer steps";
      if (job.has_evaluation()) {
        summary += ", linear probe " + Fixed(100 * job.evaluation().linear_probe_accuracy(), 2) +
                   "%, kNN " + Fixed(100 * job.evaluation().knn_accuracy(), 2) + "%";
      }
      if (!job.checkpoint().empty()) summary += "; checkpoint " + job.checkpoint();
    } else {
      summary += ": " + job.message();
    }
    display->Finish(summary);
  }
  return ExitCodeForJob(job);
}

struct SubmitOptions {
  std::string file;
  std::string request_id;
  bool dry_run = false;
  bool watch = false;
  bool wait = false;
  double reconnect_seconds = 120;
};

int RunSubmit(Context& ctx, const SubmitOptions& opt) {
  std::string text;
  if (opt.file == "-") {
    std::ostringstream in;
    in << std::cin.rdbuf();
    text = in.str();
  } else {
    auto content = ReadFileToString(opt.file);
    if (!content.ok()) return ctx.Fail(content.status());
    text = *content;
  }
  v1::SubmitJobRequest request;
  request.set_spec_yaml(text);
  request.set_request_id(opt.request_id);
  request.set_dry_run(opt.dry_run);
  v1::Job job;
  auto stub = Stub(ctx);
  Status s = Call(ctx, [&](grpc::ClientContext* c) { return stub->SubmitJob(c, request, &job); });
  if (!s.ok()) return ctx.Fail(s.WithContext(opt.file));
  if (opt.dry_run) {
    if (ctx.format() == OutputFormat::kJson) {
      std::printf("%s\n", ToJson(job, true).c_str());
    } else {
      std::printf("%s: valid (dry run, nothing created)\n", opt.file.c_str());
    }
    return kExitOk;
  }
  if (!opt.watch && !opt.wait) {
    if (ctx.format() == OutputFormat::kJson) {
      std::printf("%s\n", ToJson(job, true).c_str());
    } else {
      std::printf("%s\n", job.id().c_str());
    }
    return kExitOk;
  }
  if (ctx.format() != OutputFormat::kJson) std::printf("submitted %s\n", job.id().c_str());
  std::fflush(stdout);
  if (opt.watch) return Watch(ctx, job.id(), opt.reconnect_seconds);
  // --wait: quiet until the end (reconnecting across coordinator restarts), then the job.
  auto ended = FollowJob(
      ctx, job.id(), opt.reconnect_seconds, [](const v1::JobEvent&) {}, [](const Status&) {});
  if (!ended.ok()) return FollowFailed(ctx, ended.status());
  const v1::Job& final_job = *ended;
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(final_job, true).c_str());
  } else {
    PrintJobText(final_job);
  }
  return ExitCodeForJob(final_job);
}

int RunGet(Context& ctx, const std::string& id, bool history) {
  v1::GetJobRequest request;
  request.set_id(id);
  request.set_include_history(history);
  v1::Job job;
  auto stub = Stub(ctx);
  Status s = Call(ctx, [&](grpc::ClientContext* c) { return stub->GetJob(c, request, &job); });
  if (!s.ok()) return ctx.Fail(s);
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(job, true).c_str());
  } else {
    PrintJobText(job);
  }
  return kExitOk;
}

int RunList(Context& ctx, const std::vector<std::string>& states, int limit,
            const std::string& page_token) {
  v1::ListJobsRequest request;
  for (const auto& name : states) {
    std::string upper;
    for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    v1::JobState state;
    if (!v1::JobState_Parse("JOB_STATE_" + upper, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return ctx.Fail(
          Status::InvalidArgument("--state '" + name +
                                  "' is not a job state (pending, clustering, assigning, training, "
                                  "extracting, evaluating, succeeded, failed, cancelled)"));
    }
    request.add_states(state);
  }
  request.set_page_size(limit);
  request.set_page_token(page_token);
  v1::ListJobsResponse response;
  auto stub = Stub(ctx);
  Status s =
      Call(ctx, [&](grpc::ClientContext* c) { return stub->ListJobs(c, request, &response); });
  if (!s.ok()) return ctx.Fail(s);
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(response, true).c_str());
    return kExitOk;
  }
  std::printf("%-28s %-11s %-9s %-12s %-9s %s\n", "ID", "STATE", "AGE", "STEPS", "RESTARTS",
              "MESSAGE");
  for (const auto& job : response.jobs()) {
    std::string steps = std::to_string(job.progress().total_steps());
    if (job.progress().job_total_steps() > 0)
      steps += "/" + std::to_string(job.progress().job_total_steps());
    std::string message = Shown(IsTerminal(job.state()) ? job.message() : ProgressLine(job));
    if (message.size() > 80) message = message.substr(0, 77) + "...";
    std::printf("%-28s %-11s %-9s %-12s %-9d %s\n", Shown(job.id()).c_str(),
                StateName(job.state()).c_str(), Age(job.created_unix_ms()).c_str(), steps.c_str(),
                job.restarts(), message.c_str());
  }
  if (!response.next_page_token().empty()) {
    std::printf("(more: mlcdctl list --page-token %s)\n", response.next_page_token().c_str());
  }
  return kExitOk;
}

int RunCancel(Context& ctx, const std::string& id, const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_id(id);
  request.set_reason(reason);
  v1::Job job;
  auto stub = Stub(ctx);
  Status s = Call(ctx, [&](grpc::ClientContext* c) { return stub->CancelJob(c, request, &job); });
  if (!s.ok()) return ctx.Fail(s);
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(job, true).c_str());
  } else {
    std::printf("%s %s\n", Shown(job.id()).c_str(), StateName(job.state()).c_str());
  }
  return kExitOk;
}

int RunWorkers(Context& ctx) {
  v1::ListWorkersResponse response;
  auto stub = Stub(ctx);
  Status s = Call(ctx, [&](grpc::ClientContext* c) {
    return stub->ListWorkers(c, v1::ListWorkersRequest(), &response);
  });
  if (!s.ok()) return ctx.Fail(s);
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(response, true).c_str());
    return kExitOk;
  }
  std::printf("%-20s %-9s %-22s %-24s %-8s %s\n", "WORKER", "STATE", "HOST", "ASSIGNMENT", "SEEN",
              "KINDS");
  for (const auto& w : response.workers()) {
    std::string state = v1::WorkerState_Name(w.state());
    state = w.cordoned() ? "CORDONED" : state.substr(state.rfind('_') + 1);
    std::string kinds;
    for (int k : w.registration().kinds()) {
      std::string name = v1::AssignmentKind_Name(static_cast<v1::AssignmentKind>(k));
      kinds += (kinds.empty() ? "" : ",") + name.substr(name.rfind('_') + 1);
    }
    std::printf("%-20s %-9s %-22s %-24s %-8s %s\n", Shown(w.worker_id()).c_str(), state.c_str(),
                Shown(w.registration().host()).c_str(),
                w.assignment_id().empty() ? "-" : Shown(w.assignment_id()).c_str(),
                Age(w.last_seen_unix_ms()).c_str(), kinds.c_str());
  }
  return kExitOk;
}

int RunDrain(Context& ctx, const std::string& id, bool undo) {
  v1::DrainWorkerRequest request;
  request.set_worker_id(id);
  request.set_undo(undo);
  v1::DrainWorkerResponse response;
  auto stub = Stub(ctx);
  Status s =
      Call(ctx, [&](grpc::ClientContext* c) { return stub->DrainWorker(c, request, &response); });
  if (!s.ok()) return ctx.Fail(s);
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(response, true).c_str());
  } else if (undo) {
    std::printf("%s uncordoned: it takes new work\n", id.c_str());
  } else if (response.worker().assignment_id().empty()) {
    std::printf("%s drained: it takes no new work; safe to delete its pod\n", id.c_str());
  } else {
    std::printf(
        "%s drained: %s stops at its next checkpoint; delete the pod once `mlcdctl workers` "
        "shows it IDLE\n",
        id.c_str(), response.worker().assignment_id().c_str());
  }
  return kExitOk;
}

CommandRegistration reg(1, [](CLI::App& app, Context& ctx) {
  {
    auto opt = std::make_shared<SubmitOptions>();
    auto* cmd = app.add_subcommand(
        "submit",
        "Submit a training job from a YAML spec (apiVersion mlcd/v1, kind TrainingJob; see "
        "examples/).\n"
        "Prints the job id. Every problem of a bad spec is reported at once with its field path.\n"
        "  mlcdctl submit examples/tiny-test-job.yaml --watch");
    cmd->add_option("file", opt->file, "job spec YAML file ('-' = stdin)")->required();
    cmd->add_option(
        "--request-id", opt->request_id,
        "client-chosen id that makes the submission idempotent: resubmitting returns the same job");
    cmd->add_flag("--dry-run", opt->dry_run,
                  "validate the spec on the coordinator; create nothing");
    cmd->add_flag(
        "--watch,-w", opt->watch,
        "follow the job until it ends (like `mlcdctl watch`; Ctrl-C stops watching, exit 7, and "
        "leaves the job running)");
    cmd->add_flag("--wait", opt->wait,
                  "wait quietly until the job ends, then print it (Ctrl-C as with --watch)");
    cmd->add_option(
           "--reconnect-seconds", opt->reconnect_seconds,
           "with --watch/--wait: how long to keep reconnecting to a coordinator that went away")
        ->capture_default_str();
    cmd->callback([&ctx, opt] { ctx.exit_code = RunSubmit(ctx, *opt); });
  }
  {
    auto id = std::make_shared<std::string>();
    auto history = std::make_shared<bool>(false);
    auto* cmd =
        app.add_subcommand("get",
                           "Show a job: state, progress, rounds (clustering, label quality), "
                           "checkpoint, evaluation, time per phase.");
    cmd->add_option("id", *id, "job id")->required();
    cmd->add_flag("--history", *history,
                  "also list the job's persisted history (transitions, gangs, epoch commits)");
    cmd->callback([&ctx, id, history] { ctx.exit_code = RunGet(ctx, *id, *history); });
  }
  {
    auto states = std::make_shared<std::vector<std::string>>();
    auto limit = std::make_shared<int>(50);
    auto token = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("list", "List jobs, newest first.");
    cmd->add_option("--state", *states,
                    "only jobs in these states (repeatable), e.g. --state training");
    cmd->add_option("--limit", *limit, "jobs per page")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--page-token", *token, "continue after the previous page");
    cmd->callback(
        [&ctx, states, limit, token] { ctx.exit_code = RunList(ctx, *states, *limit, *token); });
  }
  {
    auto id = std::make_shared<std::string>();
    auto reason = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("cancel",
                                   "Cancel a job: its workers are stopped and it ends CANCELLED.");
    cmd->add_option("id", *id, "job id")->required();
    cmd->add_option("--reason", *reason, "why (kept with the job)");
    cmd->callback([&ctx, id, reason] { ctx.exit_code = RunCancel(ctx, *id, *reason); });
  }
  {
    auto id = std::make_shared<std::string>();
    auto reconnect = std::make_shared<double>(120);
    auto* cmd = app.add_subcommand(
        "watch",
        "Follow a job until it ends: a live progress bar (round, epoch, step, loss, samples/s, "
        "ETA) on a\n"
        "terminal, plain lines otherwise, one JSON event per line with --output json. Exit code 0 "
        "when\n"
        "the job SUCCEEDED, 10 when it FAILED, 11 when it was CANCELLED. Ctrl-C (or SIGTERM) "
        "stops\n"
        "watching and exits 7; the job keeps running (`mlcdctl cancel ID` stops it).");
    cmd->add_option("id", *id, "job id")->required();
    cmd->add_option("--reconnect-seconds", *reconnect,
                    "how long to keep reconnecting to a coordinator that went away")
        ->capture_default_str();
    cmd->callback([&ctx, id, reconnect] { ctx.exit_code = Watch(ctx, *id, *reconnect); });
  }
  {
    auto* cmd = app.add_subcommand(
        "workers",
        "List the workers registered with the coordinator and what they run (CORDONED = drained).");
    auto id = std::make_shared<std::string>();
    auto undo = std::make_shared<bool>(false);
    auto* drain = cmd->add_subcommand(
        "drain",
        "Drain a worker before deleting its pod (upgrades, node maintenance): it takes no new\n"
        "work, and a training gang it is in checkpoints at the end of its step and is formed\n"
        "again without it, spending no restart. --undo lifts the cordon.\n"
        "  mlcdctl workers drain mlcd-worker-1");
    drain->add_option("id", *id, "worker id (see `mlcdctl workers`)")->required();
    drain->add_flag("--undo", *undo, "uncordon: the worker takes new work again");
    drain->callback([&ctx, id, undo] { ctx.exit_code = RunDrain(ctx, *id, *undo); });
    cmd->callback([&ctx, cmd] {
      if (cmd->get_subcommands().empty()) ctx.exit_code = RunWorkers(ctx);
    });
  }
});

}  // namespace
}  // namespace mlcd::cli
