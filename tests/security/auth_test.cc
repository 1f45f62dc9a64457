// Identity and roles on the real coordinator and label store (TLS + tokens on, as the
// TestCluster harness always runs them): missing, unknown, expired and wrong-role tokens,
// a submitter cancelling another's job, request ids of two users (and who reads them), and a
// fake worker trying to take over a live one.
#include <gtest/gtest.h>

#include "clients/coordinator_client.h"
#include "common/cert_maker.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "common/security.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/coordinator/harness.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// A call's context with `token` as bearer token ("" = none) and a 10 s deadline.
std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(DeadlineIn(seconds(10)));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartServices().ok()) << cluster_.Logs();
    bare_ = v1::Coordinator::NewStub(TokenlessChannel(cluster_.coordinator_address()));
  }

  StatusOr<v1::Job> SubmitAs(const std::string& token, const std::string& yaml,
                             const std::string& request_id = "") {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(yaml);
    request.set_request_id(request_id);
    v1::Job job;
    auto ctx = Ctx(token);
    MLCD_RETURN_IF_ERROR(FromGrpcStatus(bare_->SubmitJob(ctx.get(), request, &job)));
    return job;
  }

  grpc::Status CancelAs(const std::string& token, const std::string& id) {
    v1::CancelJobRequest request;
    request.set_id(id);
    v1::Job job;
    auto ctx = Ctx(token);
    return bare_->CancelJob(ctx.get(), request, &job);
  }

  grpc::Status RegisterAs(const std::string& token, const std::string& name) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    request.set_host("127.0.0.1");
    request.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    v1::RegisterWorkerResponse response;
    auto ctx = Ctx(token);
    return bare_->RegisterWorker(ctx.get(), request, &response);
  }

  grpc::Status PollAs(const std::string& token, const std::string& name, v1::Assignment* a,
                      int wait = 0) {
    v1::GetAssignmentRequest request;
    request.set_worker_id(name);
    request.set_wait_seconds(wait);
    request.set_rendezvous_port(PickFreePort());
    auto ctx = Ctx(token);
    return bare_->GetAssignment(ctx.get(), request, a);
  }

  grpc::Status HeartbeatAs(const std::string& token, const std::string& name,
                           const std::string& aid, v1::HeartbeatResponse* response) {
    v1::HeartbeatRequest request;
    request.set_worker_id(name);
    request.set_assignment_id(aid);
    auto ctx = Ctx(token);
    return bare_->Heartbeat(ctx.get(), request, response);
  }

  grpc::Status ReportAs(const std::string& token, const std::string& name, const std::string& aid) {
    v1::ReportAssignmentRequest request;
    request.set_worker_id(name);
    request.set_assignment_id(aid);
    request.set_succeeded(true);
    request.mutable_progress()->set_checkpoint("/etc");
    request.mutable_progress()->set_step(999999);
    v1::ReportAssignmentResponse response;
    auto ctx = Ctx(token);
    return bare_->ReportAssignment(ctx.get(), request, &response);
  }

  TempDir dir_;
  TestCluster cluster_{dir_};
  std::unique_ptr<v1::Coordinator::Stub> bare_;
  const TestSecurity& t_ = TestCerts();
};

TEST_F(AuthTest, TokensAndRolesDecideWhoMayCallWhat) {
  v1::ListJobsResponse jobs;
  grpc::Status none = bare_->ListJobs(Ctx("").get(), v1::ListJobsRequest(), &jobs);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("needs a bearer token with role viewer"), std::string::npos)
      << none.error_message();
  grpc::Status unknown =
      bare_->ListJobs(Ctx("ffffffffffffffffffffffffffffffff").get(), v1::ListJobsRequest(), &jobs);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(unknown.error_message().find("not in the service's tokens file"), std::string::npos);
  grpc::Status expired = bare_->ListJobs(Ctx(t_.expired_token).get(), v1::ListJobsRequest(), &jobs);
  EXPECT_EQ(expired.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(expired.error_message().find("'old-admin' expired"), std::string::npos)
      << expired.error_message();
  grpc::Status malformed = [&] {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Basic abc");
    return bare_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs);
  }();
  EXPECT_EQ(malformed.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(bare_->ListJobs(Ctx(t_.viewer_token).get(), v1::ListJobsRequest(), &jobs).ok());

  // A viewer cannot submit; a worker token is not a user token; a submitter cannot list workers.
  TinyJob tiny;
  auto viewer_submit = SubmitAs(t_.viewer_token, tiny.Yaml());
  EXPECT_EQ(viewer_submit.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(viewer_submit.status().message().find("'carol' has role viewer; SubmitJob needs "
                                                  "submitter or admin"),
            std::string::npos)
      << viewer_submit.status().message();
  EXPECT_EQ(SubmitAs(t_.worker_token, tiny.Yaml()).status().code(), StatusCode::kPermissionDenied);
  v1::ListWorkersResponse workers;
  EXPECT_EQ(bare_->ListWorkers(Ctx(t_.submitter_token).get(), v1::ListWorkersRequest(), &workers)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(
      bare_->ListWorkers(Ctx(t_.admin_token).get(), v1::ListWorkersRequest(), &workers).ok());
  // A client certificate alone is no user identity.
  EXPECT_EQ(bare_->ListJobs(Ctx("").get(), v1::ListJobsRequest(), &jobs).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // Label store: viewers read; a set's owner or an admin deletes it (label_ownership_test has
  // the whole ownership matrix).
  grpc::ChannelArguments args;
  auto ls = v1::LabelStore::NewStub(
      grpc::CreateCustomChannel(cluster_.labelstore_address(), ChannelCredentials(), args));
  v1::CreateLabelSetRequest create;
  create.set_name("sec-test");
  create.set_num_classes(8);
  create.set_labels_per_sample(2);
  v1::LabelSetInfo info;
  EXPECT_EQ(ls->CreateLabelSet(Ctx(t_.viewer_token).get(), create, &info).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(ls->CreateLabelSet(Ctx(t_.submitter_token).get(), create, &info).ok());
  v1::DeleteLabelSetRequest del;
  del.set_name("sec-test");
  v1::DeleteLabelSetResponse deleted;
  grpc::Status viewer_delete = ls->DeleteLabelSet(Ctx(t_.viewer_token).get(), del, &deleted);
  EXPECT_EQ(viewer_delete.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(
      viewer_delete.error_message().find("DeleteLabelSet needs submitter or admin or service"),
      std::string::npos)
      << viewer_delete.error_message();
  grpc::Status other_delete = ls->DeleteLabelSet(Ctx(t_.submitter2_token).get(), del, &deleted);
  EXPECT_EQ(other_delete.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(other_delete.error_message().find("is owned by 'token:alice'"), std::string::npos)
      << other_delete.error_message();
  v1::ListLabelSetsResponse sets;
  EXPECT_EQ(ls->ListLabelSets(Ctx("").get(), v1::ListLabelSetsRequest(), &sets).error_code(),
            grpc::StatusCode::OK)
      << "a client certificate acts as a service for the label store";
  EXPECT_TRUE(ls->DeleteLabelSet(Ctx(t_.admin_token).get(), del, &deleted).ok());
}

TEST_F(AuthTest, ASubmitterCancelsOnlyItsOwnJobs) {
  TinyJob tiny;
  auto job = SubmitAs(t_.submitter_token, tiny.Yaml());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->submitted_by(), "token:alice");
  grpc::Status bob = CancelAs(t_.submitter2_token, job->id());
  EXPECT_EQ(bob.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(bob.error_message().find("submitted by 'token:alice'"), std::string::npos)
      << bob.error_message();
  EXPECT_EQ(CancelAs(t_.viewer_token, job->id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  auto still = cluster_.Get(job->id());
  ASSERT_TRUE(still.ok());
  EXPECT_NE(still->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(CancelAs(t_.submitter_token, job->id()).ok());
  // An admin cancels anyone's job.
  auto other = SubmitAs(t_.submitter2_token, tiny.Yaml());
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(CancelAs(t_.admin_token, other->id()).ok());
}

// SubmitJob's request id is each user's own: alice retrying gets her job, bob sending the
// same id gets a job of his own (never alice's), before and after a coordinator restart.
TEST_F(AuthTest, RequestIdsAreEachUsersOwn) {
  TinyJob tiny;
  auto alice = SubmitAs(t_.submitter_token, tiny.Yaml(), "nightly-run");
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  EXPECT_EQ(alice->submitted_by(), "token:alice");
  auto retry = SubmitAs(t_.submitter_token, tiny.Yaml(), "nightly-run");
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ(retry->id(), alice->id());
  auto bob = SubmitAs(t_.submitter2_token, tiny.Yaml(), "nightly-run");
  ASSERT_TRUE(bob.ok()) << bob.status().ToString();
  EXPECT_NE(bob->id(), alice->id());
  EXPECT_EQ(bob->submitted_by(), "token:bob");
  // Bob's own job is his to cancel (and alice's stays untouched).
  EXPECT_TRUE(CancelAs(t_.submitter2_token, bob->id()).ok());
  // Even with another spec bob's request id says nothing about alice's job.
  TinyJob other = tiny;
  other.k = 24;
  auto bob_other = SubmitAs(t_.submitter2_token, other.Yaml(), "nightly-run");
  EXPECT_EQ(bob_other.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(bob_other.status().message().find(alice->id()), std::string::npos)
      << bob_other.status().message();

  cluster_.KillCoordinator();
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
  auto alice_again = SubmitAs(t_.submitter_token, tiny.Yaml(), "nightly-run");
  ASSERT_TRUE(alice_again.ok()) << alice_again.status().ToString();
  EXPECT_EQ(alice_again->id(), alice->id());
  auto bob_again = SubmitAs(t_.submitter2_token, tiny.Yaml(), "nightly-run");
  ASSERT_TRUE(bob_again.ok()) << bob_again.status().ToString();
  EXPECT_EQ(bob_again->id(), bob->id());
  EXPECT_EQ(bob_again->state(), v1::JOB_STATE_CANCELLED);
  // The admin is an identity of its own too.
  auto admin = SubmitAs(t_.admin_token, tiny.Yaml(), "nightly-run");
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  EXPECT_NE(admin->id(), alice->id());
  EXPECT_NE(admin->id(), bob->id());
  EXPECT_TRUE(CancelAs(t_.admin_token, alice->id()).ok());
  EXPECT_TRUE(CancelAs(t_.admin_token, admin->id()).ok());
}

// A request id is its sender's also when others read the job: GetJob (with its history),
// ListJobs and WatchJob show it to the submitter and to admins, to a viewer and to another
// submitter not at all.
TEST_F(AuthTest, OthersReadingAJobDoNotSeeItsRequestId) {
  TinyJob tiny;
  const std::string id = "alice-private-nightly";
  auto alice = SubmitAs(t_.submitter_token, tiny.Yaml(), id);
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  EXPECT_EQ(alice->request_id(), id);
  // What each way of reading the job shows `token`: the request id, and whether the id
  // appears anywhere in what came back.
  auto read = [&](const std::string& token, const std::string& how) {
    v1::Job job;
    if (how == "get") {
      v1::GetJobRequest request;
      request.set_id(alice->id());
      request.set_include_history(true);
      auto ctx = Ctx(token);
      EXPECT_TRUE(bare_->GetJob(ctx.get(), request, &job).ok());
    } else if (how == "list") {
      v1::ListJobsRequest request;
      v1::ListJobsResponse response;
      auto ctx = Ctx(token);
      EXPECT_TRUE(bare_->ListJobs(ctx.get(), request, &response).ok());
      for (const auto& j : response.jobs())
        if (j.id() == alice->id()) job = j;
    } else {
      v1::WatchJobRequest request;
      request.set_id(alice->id());
      auto ctx = Ctx(token);
      auto reader = bare_->WatchJob(ctx.get(), request);
      v1::JobEvent event;
      EXPECT_TRUE(reader->Read(&event));
      job = event.job();
      ctx->TryCancel();
      (void)reader->Finish();
    }
    EXPECT_EQ(job.id(), alice->id()) << how;
    return std::make_pair(job.request_id(), job.DebugString().find(id) != std::string::npos);
  };
  for (const std::string how : {"get", "list", "watch"}) {
    EXPECT_EQ(read(t_.submitter_token, how), std::make_pair(id, true)) << how;
    EXPECT_EQ(read(t_.admin_token, how), std::make_pair(id, true)) << how;
    EXPECT_EQ(read(t_.viewer_token, how), std::make_pair(std::string(), false)) << how;
    EXPECT_EQ(read(t_.submitter2_token, how), std::make_pair(std::string(), false)) << how;
  }
  EXPECT_TRUE(CancelAs(t_.submitter_token, alice->id()).ok());
}

TEST_F(AuthTest, AFakeWorkerCannotTakeOverALiveWorkerOrItsAssignment) {
  ASSERT_TRUE(RegisterAs(t_.worker_token, "victim").ok());
  v1::Assignment none;
  ASSERT_TRUE(PollAs(t_.worker_token, "victim", &none).ok());
  TinyJob tiny;
  tiny.world_size = 1;
  tiny.heartbeat_timeout = 30;
  auto job = SubmitAs(t_.admin_token, tiny.Yaml());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  v1::Assignment a;
  for (int i = 0; i < 60 && a.kind() == v1::ASSIGNMENT_KIND_NONE; ++i) {
    ASSERT_TRUE(PollAs(t_.worker_token, "victim", &a, 1).ok());
  }
  ASSERT_EQ(a.kind(), v1::ASSIGNMENT_KIND_TRAIN) << cluster_.Logs();

  // Another identity (worker-b's token, or the services' certificate) may not re-register
  // the live worker's name, poll, heartbeat or report for it.
  for (const std::string& intruder : {t_.worker2_token, std::string()}) {
    EXPECT_EQ(RegisterAs(intruder, "victim").error_code(), grpc::StatusCode::PERMISSION_DENIED);
    v1::Assignment stolen;
    EXPECT_EQ(PollAs(intruder, "victim", &stolen).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    v1::HeartbeatResponse hb;
    grpc::Status spoof = HeartbeatAs(intruder, "victim", "", &hb);
    EXPECT_EQ(spoof.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_NE(spoof.error_message().find("registered by 'token:worker-a'"), std::string::npos)
        << spoof.error_message();
    EXPECT_EQ(ReportAs(intruder, "victim", a.id()).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // A worker of its own reporting the victim's assignment id: not its assignment.
  ASSERT_TRUE(RegisterAs(t_.worker2_token, "intruder").ok());
  grpc::Status stolen_report = ReportAs(t_.worker2_token, "intruder", a.id());
  EXPECT_EQ(stolen_report.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(stolen_report.error_message().find("was given to worker victim"), std::string::npos)
      << stolen_report.error_message();

  // The victim carries on: its heartbeat is answered CONTINUE and the job was not touched.
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(HeartbeatAs(t_.worker_token, "victim", a.id(), &hb).ok());
  EXPECT_EQ(hb.action(), v1::WORKER_ACTION_CONTINUE) << hb.reason();
  auto now = cluster_.Get(job->id());
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->state(), v1::JOB_STATE_TRAINING);
  EXPECT_EQ(now->restarts(), 0);
  EXPECT_NE(now->state(), v1::JOB_STATE_SUCCEEDED);
}

// Per-pod certificates (deploy/k8s/extras/cert-manager-csi: cert-manager's csi-driver gives
// each worker pod its own, CN = <pod>.mlcd-worker.<namespace>.svc): the coordinator binds a
// worker to its certificate's CN, so one pod cannot act for another's live worker, where
// pods sharing one certificate could. No tokens here: the workers act by certificate alone.
TEST_F(AuthTest, PerPodCertificatesBindEachWorkerToItsPod) {
  const std::string certs = dir_.Sub("pods");
  auto pod_channel = [&](const std::string& pod) -> std::unique_ptr<v1::Coordinator::Stub> {
    auto files = IssueCert(t_.ca, certs, pod, pod + ".mlcd-worker.mlcd.svc",
                           {"DNS:" + pod + ".mlcd-worker.mlcd.svc", "DNS:localhost"});
    EXPECT_TRUE(files.ok()) << files.status().ToString();
    if (!files.ok()) return nullptr;
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *ReadFileToString(t_.ca.cert);
    ssl.pem_cert_chain = *ReadFileToString(files->cert);
    ssl.pem_private_key = *ReadFileToString(files->key);
    grpc::ChannelArguments args;
    return v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(cluster_.coordinator_address(), grpc::SslCredentials(ssl), args));
  };
  ASSERT_TRUE(MakeDirs(certs).ok());
  auto pod0 = pod_channel("mlcd-worker-0");
  auto pod1 = pod_channel("mlcd-worker-1");
  ASSERT_TRUE(pod0 && pod1);
  auto register_as = [&](v1::Coordinator::Stub* stub, const std::string& name) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    request.set_host("127.0.0.1");
    request.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    v1::RegisterWorkerResponse response;
    return stub->RegisterWorker(Ctx("").get(), request, &response);
  };
  auto poll_as = [&](v1::Coordinator::Stub* stub, const std::string& name) {
    v1::GetAssignmentRequest request;
    request.set_worker_id(name);
    request.set_rendezvous_port(PickFreePort());
    v1::Assignment a;
    return stub->GetAssignment(Ctx("").get(), request, &a);
  };
  ASSERT_TRUE(register_as(pod0.get(), "mlcd-worker-0").ok());
  ASSERT_TRUE(poll_as(pod0.get(), "mlcd-worker-0").ok());
  ASSERT_TRUE(register_as(pod1.get(), "mlcd-worker-1").ok());
  // Pod 1's certificate may not take over, poll or heartbeat for pod 0's live worker.
  grpc::Status takeover = register_as(pod1.get(), "mlcd-worker-0");
  EXPECT_EQ(takeover.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(takeover.error_message().find(
                "registered by 'cert:mlcd-worker-0.mlcd-worker.mlcd.svc' and alive; "
                "'cert:mlcd-worker-1.mlcd-worker.mlcd.svc' may not take it over"),
            std::string::npos)
      << takeover.error_message();
  EXPECT_EQ(poll_as(pod1.get(), "mlcd-worker-0").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::HeartbeatRequest hb;
  hb.set_worker_id("mlcd-worker-0");
  v1::HeartbeatResponse hb_response;
  EXPECT_EQ(pod1->Heartbeat(Ctx("").get(), hb, &hb_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Nor may the services' shared certificate (this process's); pod 0 goes on.
  v1::Assignment stolen;
  EXPECT_EQ(PollAs("", "mlcd-worker-0", &stolen).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(poll_as(pod0.get(), "mlcd-worker-0").ok());
  // A certificate is no user identity: the user API still needs a token.
  v1::ListJobsResponse jobs;
  EXPECT_EQ(pod0->ListJobs(Ctx("").get(), v1::ListJobsRequest(), &jobs).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, MlcdctlSendsItsTokenFileAndExitsEightWhenRefused) {
  const std::string flag = "--coordinator=" + cluster_.coordinator_address();
  std::string out;
  // No token: refused, saying what is missing (the environment's admin token cleared).
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "list"}, &out, {"MLCD_TOKEN_FILE="}), 8) << out;
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
  EXPECT_NE(out.find("--token-file"), std::string::npos) << out;
  // A viewer's token file: it lists, but may not list workers.
  EXPECT_EQ(
      RunCommand(BinPath("mlcdctl"), {flag, "--token-file", t_.viewer_token_file, "list"}, &out), 0)
      << out;
  EXPECT_EQ(
      RunCommand(BinPath("mlcdctl"), {flag, "--token-file", t_.viewer_token_file, "workers"}, &out),
      8)
      << out;
  EXPECT_NE(out.find("PERMISSION_DENIED"), std::string::npos) << out;
  // A token file that does not exist: a usage error before any call.
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "--token-file", dir_.Sub("none"), "list"}, &out),
            2)
      << out;
  EXPECT_NE(out.find("--token-file"), std::string::npos) << out;
  // Without TLS settings the token is not sent in plaintext (plaintext_token_test.cc);
  // without one either, mlcdctl speaks plaintext, which the TLS coordinator does not accept.
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "--timeout", "3", "list"}, &out,
                       {"MLCD_TLS_CA=", "MLCD_TLS_CERT=", "MLCD_TLS_KEY="}),
            5)
      << out;
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"), {flag, "--timeout", "3", "list"}, &out,
                       {"MLCD_TLS_CA=", "MLCD_TLS_CERT=", "MLCD_TLS_KEY=", "MLCD_TOKEN_FILE="}),
            6)
      << out;
}

}  // namespace
}  // namespace mlcd::testing
