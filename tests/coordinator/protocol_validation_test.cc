// Malformed specs and requests against the real coordinator: each refusal names the field
// path (the fixture: tests/coordinator/protocol_fixture.h).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/npy.h"
#include "tests/coordinator/protocol_fixture.h"

namespace mlcd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(CoordinatorProtocolTest, MalformedSpecsAndRequestsAreRejectedWithFieldPaths) {
  ProtocolWorker trainer(cluster_.get(), "train-only");
  ASSERT_TRUE(trainer.Register().ok());
  const std::string good = TinyJob().Yaml();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string y = good;
    size_t pos = y.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    if (pos != std::string::npos) y.replace(pos, from.size(), to);
    return y;
  };
  struct Case {
    std::string name;
    std::function<Status()> call;
    StatusCode code;
    std::vector<std::string> expected;  // substrings of the message
  };
  auto submit_yaml = [&](const std::string& yaml) {
    return [this, yaml] { return cluster_->Submit(yaml).status(); };
  };
  auto submit = [this](const v1::SubmitJobRequest& request) {
    return [this, request] {
      grpc::ClientContext context;
      v1::Job job;
      return FromGrpcStatus(cluster_->stub()->SubmitJob(&context, request, &job));
    };
  };
  // Fashion-MNIST is grey: a 3-channel model is refused at submit and in the dry run (it
  // used to pass and fail at training until the restart budget was spent).
  const std::string three_channels = with("embed_dim: 32}", "embed_dim: 32, channels: 3}");
  v1::SubmitJobRequest dry_three_channels;
  dry_three_channels.set_spec_yaml(three_channels);
  dry_three_channels.set_dry_run(true);
  v1::SubmitJobRequest both;
  both.set_spec_yaml(good);
  both.mutable_spec()->mutable_training()->set_world_size(2);
  v1::SubmitJobRequest bad_message;
  bad_message.mutable_spec()->mutable_loss()->set_scale(-1);
  bad_message.mutable_spec()->mutable_training()->set_world_size(3);
  bad_message.mutable_spec()->mutable_training()->set_batch_size(64);
  bad_message.mutable_metadata()->set_name("white space");

  std::vector<Case> cases = {
      {"l > k",
       submit_yaml(with("l: 4", "l: 40")),
       StatusCode::kInvalidArgument,
       {"spec.clustering.l: 40 > k: 16"}},
      {"unknown field",
       submit_yaml(with("batch_size:", "batch_sze:")),
       StatusCode::kInvalidArgument,
       {"spec.training.batch_sze", "did you mean batch_size?"}},
      {"api version",
       submit_yaml(with("apiVersion: mlcd/v1", "apiVersion: mlcd/v9")),
       StatusCode::kInvalidArgument,
       {"apiVersion (line 1): 'mlcd/v9' is not supported"}},
      {"yaml syntax",
       submit_yaml("spec: {training: [\n"),
       StatusCode::kInvalidArgument,
       {"not valid YAML"}},
      {"batch not divisible",
       submit_yaml(with("world_size: 2", "world_size: 3")),
       StatusCode::kInvalidArgument,
       {"spec.training.batch_size: 64 is not divisible by world_size: 3"}},
      {"k above images",
       submit_yaml(with("k: 16", "k: 5000")),
       StatusCode::kInvalidArgument,
       {"spec.clustering.k: 5000 > the 384 training images"}},
      {"wrong type",
       submit_yaml(with("epochs_per_round: 2", "epochs_per_round: two")),
       StatusCode::kInvalidArgument,
       {"spec.training.epochs_per_round", "'two' is not a whole number"}},
      {"missing npy",
       submit_yaml(
           with("features: {kind: pixels}", "features: {kind: npy, paths: [/nonexistent/f.npy]}")),
       StatusCode::kInvalidArgument,
       {"spec.clustering.features.paths[0]", "/nonexistent/f.npy"}},
      {"missing dataset",
       submit_yaml(with("augment: false", "augment: false, path: /nonexistent/fmnist")),
       StatusCode::kInvalidArgument,
       {"spec.dataset.path"}},
      {"model channels differ from the dataset's",
       submit_yaml(three_channels),
       StatusCode::kInvalidArgument,
       {"spec.model.channels: 3 but fashion-mnist (spec.dataset) has 1 channel"}},
      {"model channels differ from the dataset's (dry run)",
       submit(dry_three_channels),
       StatusCode::kInvalidArgument,
       {"spec.model.channels: 3 but fashion-mnist (spec.dataset) has 1 channel"}},
      {"yaml and message",
       submit(both),
       StatusCode::kInvalidArgument,
       {"spec_yaml and spec/metadata are both set"}},
      {"empty request",
       submit(v1::SubmitJobRequest()),
       StatusCode::kInvalidArgument,
       {"empty request"}},
      {"bad message spec",
       submit(bad_message),
       StatusCode::kInvalidArgument,
       {"spec.loss.scale: -1", "spec.training.batch_size: 64 is not divisible by world_size: 3",
        "metadata.name"}},
      {"rounds without embed workers",
       submit_yaml(with("rounds: 1", "rounds: 2")),
       StatusCode::kFailedPrecondition,
       {"spec.training.rounds: 2", "embed"}},
      {"get without id",
       [this] {
         grpc::ClientContext c;
         v1::Job j;
         return FromGrpcStatus(cluster_->stub()->GetJob(&c, v1::GetJobRequest(), &j));
       },
       StatusCode::kInvalidArgument,
       {"id: empty"}},
      {"get unknown",
       [this] { return cluster_->Get("no-such-job").status(); },
       StatusCode::kNotFound,
       {"no-such-job"}},
      {"cancel unknown",
       [this] { return cluster_->Cancel("no-such-job").status(); },
       StatusCode::kNotFound,
       {"no-such-job"}},
      {"list bad page size",
       [this] {
         grpc::ClientContext c;
         v1::ListJobsRequest r;
         r.set_page_size(-1);
         v1::ListJobsResponse resp;
         return FromGrpcStatus(cluster_->stub()->ListJobs(&c, r, &resp));
       },
       StatusCode::kInvalidArgument,
       {"page_size"}},
      {"list bad token",
       [this] {
         grpc::ClientContext c;
         v1::ListJobsRequest r;
         r.set_page_token("abc");
         v1::ListJobsResponse resp;
         return FromGrpcStatus(cluster_->stub()->ListJobs(&c, r, &resp));
       },
       StatusCode::kInvalidArgument,
       {"page_token"}},
      {"list bad state",
       [this] {
         grpc::ClientContext c;
         v1::ListJobsRequest r;
         r.add_states(static_cast<v1::JobState>(42));
         v1::ListJobsResponse resp;
         return FromGrpcStatus(cluster_->stub()->ListJobs(&c, r, &resp));
       },
       StatusCode::kInvalidArgument,
       {"states: 42"}},
      {"register bad name",
       [this] {
         grpc::ClientContext c;
         v1::RegisterWorkerRequest r;
         r.set_name("bad name/with slash");
         r.set_host("127.0.0.1");
         v1::RegisterWorkerResponse resp;
         return FromGrpcStatus(cluster_->stub()->RegisterWorker(&c, r, &resp));
       },
       StatusCode::kInvalidArgument,
       {"name:"}},
      {"poll unknown worker",
       [this] { return ProtocolWorker(cluster_.get(), "ghost").Poll(0).status(); },
       StatusCode::kNotFound,
       {"unknown worker 'ghost'", "register first"}},
      {"poll too long",
       [this] {
         grpc::ClientContext c;
         v1::GetAssignmentRequest r;
         r.set_worker_id("train-only");
         r.set_wait_seconds(1000);
         v1::Assignment a;
         return FromGrpcStatus(cluster_->stub()->GetAssignment(&c, r, &a));
       },
       StatusCode::kInvalidArgument,
       {"wait_seconds: 1000"}},
  };
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    Status s = c.call();
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s.ToString();
    for (const auto& e : c.expected) {
      EXPECT_NE(s.message().find(e), std::string::npos) << c.name << ": '" << e << "' not in:\n"
                                                        << s.message();
    }
  }
  // Nothing was created; the registered worker is untouched.
  grpc::ClientContext context;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(cluster_->stub()->ListJobs(&context, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
  auto workers = cluster_->Workers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->workers_size(), 1);
  EXPECT_EQ(workers->workers(0).state(), v1::WORKER_STATE_IDLE);
  // A heartbeat from an unknown worker is told to register (not an error).
  auto hb = ProtocolWorker(cluster_.get(), "ghost").Heartbeat("x", Running(1));
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->action(), v1::WORKER_ACTION_REREGISTER);
  // A dry run validates without creating.
  v1::SubmitJobRequest dry;
  dry.set_spec_yaml(good);
  dry.set_dry_run(true);
  grpc::ClientContext dc;
  v1::Job dry_job;
  ASSERT_TRUE(cluster_->stub()->SubmitJob(&dc, dry, &dry_job).ok());
  EXPECT_TRUE(dry_job.id().empty());
  grpc::ClientContext lc;
  ASSERT_TRUE(cluster_->stub()->ListJobs(&lc, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

// clustering.engine gang runs a round's CLUSTER and ASSIGN_LABELS gangs on the job's workers: a
// submission is refused while workers are registered and none can run one of the two kinds
// (the message names the kind and the fixes); with no worker registered it is accepted (the
// job waits for workers, as for every other kind).
TEST_F(CoordinatorProtocolTest, GangEngineIsRefusedWithoutWorkersThatRunBothGangKinds) {
  const std::string features = dir_.Sub("features.npy");
  std::vector<float> rows(384 * 16, 0.5f);
  ASSERT_TRUE(WriteNpy(features, NpyDtype::kFloat32, {384, 16}, rows.data()).ok());
  TinyJob spec;
  spec.features = "{kind: npy, paths: [" + features + "]}";
  spec.clustering_fields = "engine: gang";
  auto dry_run = [&]() {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(spec.Yaml());
    request.set_dry_run(true);
    grpc::ClientContext context;
    v1::Job job;
    return FromGrpcStatus(cluster_->stub()->SubmitJob(&context, request, &job));
  };
  EXPECT_TRUE(dry_run().ok()) << "no worker registered: the job waits for workers";

  ProtocolWorker trainer(cluster_.get(), "train-only");
  ASSERT_TRUE(trainer.Register().ok());
  ProtocolWorker half(cluster_.get(), "cluster-only",
                      {v1::ASSIGNMENT_KIND_TRAIN, v1::ASSIGNMENT_KIND_CLUSTER});
  struct Step {
    ProtocolWorker* registers;  // null: none more
    std::string kind;           // the kind named in the refusal
  };
  for (const Step& step : {Step{nullptr, "cluster (mlcd-worker cluster-gang)"},
                           Step{&half, "assign labels (mlcd-worker cluster-gang)"}}) {
    if (step.registers) {
      ASSERT_TRUE(step.registers->Register().ok());
    }
    auto submitted = cluster_->Submit(spec.Yaml());
    ASSERT_FALSE(submitted.ok()) << "accepted without workers that can " << step.kind;
    EXPECT_EQ(submitted.status().code(), StatusCode::kFailedPrecondition);
    for (const std::string& expected :
         {"spec.clustering.engine: gang needs workers that can " + step.kind,
          std::string("set engine: clusterd or start workers whose mlcd-worker has the "
                      "cluster-gang command")}) {
      EXPECT_NE(submitted.status().message().find(expected), std::string::npos)
          << "'" << expected << "' not in: " << submitted.status().message();
    }
  }
  ProtocolWorker full(cluster_.get(), "gang-worker",
                      {v1::ASSIGNMENT_KIND_TRAIN, v1::ASSIGNMENT_KIND_CLUSTER,
                       v1::ASSIGNMENT_KIND_ASSIGN_LABELS});
  ASSERT_TRUE(full.Register().ok());
  EXPECT_TRUE(dry_run().ok()) << "a worker runs both gang kinds now";
  grpc::ClientContext context;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(cluster_->stub()->ListJobs(&context, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0) << "a refused submission created a job";
}

}  // namespace
}  // namespace mlcd::testing
