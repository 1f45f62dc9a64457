// mlcdctl logs: where a job's logs are.
//
//   mlcdctl logs JOB --tensorboard
//       prints the folder of the job's TensorBoard event files (Job.tensorboard_dir; runs
//       train/ and coordinator/, docs/metrics.md "TensorBoard"), so that
//         tensorboard --logdir "$(mlcdctl logs JOB --tensorboard)"
//       shows its curves. With --output json: {"job": ..., "tensorboard_dir": ...}.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "client/cli.h"
#include "clients/coordinator_client.h"

namespace mlcd::cli {
namespace {

struct LogsOptions {
  std::string job;
  bool tensorboard = false;
};

int RunLogs(Context& ctx, const LogsOptions& o) {
  if (!o.tensorboard)
    return ctx.Fail(Status::InvalidArgument(
        "say which logs: --tensorboard (the job's TensorBoard event files); the job's history is "
        "`mlcdctl get " +
        o.job + " --history`"));
  auto stub = coordinator::NewCoordinatorStub(ctx.coordinator);
  grpc::ClientContext context;
  context.set_deadline(ctx.Deadline());
  v1::GetJobRequest request;
  request.set_id(o.job);
  v1::Job job;
  grpc::Status s = stub->GetJob(&context, request, &job);
  if (!s.ok()) return ctx.Fail(FromGrpcStatus(s).WithContext("coordinator " + ctx.coordinator));
  if (job.tensorboard_dir().empty())
    return ctx.Fail(Status::NotFound("job " + job.id() +
                                     " has no TensorBoard folder (it was submitted to a "
                                     "coordinator without them)"));
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("%s\n",
                nlohmann::json{{"job", job.id()}, {"tensorboard_dir", job.tensorboard_dir()}}
                    .dump()
                    .c_str());
  } else {
    std::printf("%s\n", job.tensorboard_dir().c_str());
  }
  return kExitOk;
}

CommandRegistration reg(15, [](CLI::App& app, Context& ctx) {
  auto o = std::make_shared<LogsOptions>();
  auto* cmd = app.add_subcommand(
      "logs",
      "Where a job's logs are.\n"
      "  mlcdctl logs JOB --tensorboard    the folder of its TensorBoard event files:\n"
      "                                    tensorboard --logdir \"$(mlcdctl logs JOB "
      "--tensorboard)\"");
  cmd->add_option("job", o->job, "job id")->required();
  cmd->add_flag("--tensorboard", o->tensorboard,
                "print the folder of the job's TensorBoard event files (runs train/ and "
                "coordinator/)");
  cmd->callback([&ctx, o] { ctx.exit_code = RunLogs(ctx, *o); });
});

}  // namespace
}  // namespace mlcd::cli
