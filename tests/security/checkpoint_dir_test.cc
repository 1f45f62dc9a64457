// Where a job's checkpoints go (docs/hardening.md, "Checkpoints"), on the real coordinator,
// clusterd and label store with TLS and tokens on. Before, training.checkpoint_dir only had to
// lie under a data root: a submitter pointed it at another job's ckpt/ (replacing its
// committed checkpoint and pruning the rest) or into another user's area, and the checkpoint
// rank 0 reported was committed wherever it lay. Now checkpoint_dir must lie in the
// submitter's own output area, a root belongs to one job, and a reported checkpoint outside
// the job's root is never committed.
#include <gtest/gtest.h>

#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "common/security.h"
#include "tests/coordinator/harness.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartServices().ok()) << cluster_.Logs();
    bare_ = v1::Coordinator::NewStub(TokenlessChannel(cluster_.coordinator_address()));
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.Logs();
  }

  std::string coord() const { return cluster_.coordinator_data_dir(); }
  std::string Area(const std::string& user) const { return coord() + "/users/token/" + user; }

  // The tiny job (one worker) with `checkpoint_dir`, submitted as `token`.
  StatusOr<v1::Job> SubmitAs(const std::string& token, const std::string& checkpoint_dir,
                             const std::string& request_id = "") {
    TinyJob spec;
    spec.world_size = 1;
    spec.checkpoint_dir = checkpoint_dir;
    v1::SubmitJobRequest request;
    request.set_spec_yaml(spec.Yaml());
    request.set_request_id(request_id);
    v1::Job job;
    auto ctx = CallContext(token);
    MLCD_RETURN_IF_ERROR(FromGrpcStatus(bare_->SubmitJob(ctx.get(), request, &job)));
    return job;
  }

  static void ExpectRefused(const StatusOr<v1::Job>& job, StatusCode code,
                            const std::vector<std::string>& parts) {
    ASSERT_FALSE(job.ok()) << "accepted: " << job->id();
    EXPECT_EQ(job.status().code(), code) << job.status().ToString();
    for (const auto& part : parts)
      EXPECT_NE(job.status().message().find(part), std::string::npos)
          << "'" << part << "' not in: " << job.status().ToString();
  }

  TempDir dir_;
  TestCluster cluster_{dir_};
  const TestSecurity& t_ = TestCerts();
  std::unique_ptr<v1::Coordinator::Stub> bare_;
};

TEST_F(CheckpointDirTest, ASubmitterNamesCheckpointFoldersOnlyInItsOwnArea) {
  // Bob's job keeps its checkpoints in its own folder (no checkpoint_dir).
  auto bobs = SubmitAs(t_.submitter2_token, "");
  ASSERT_TRUE(bobs.ok()) << bobs.status().ToString();
  const std::string bobs_ckpt = coord() + "/jobs/" + bobs->id() + "/ckpt";
  const std::string field = "spec.training.checkpoint_dir";

  // Alice may not point hers at bob's job's folder, into bob's area, nor anywhere else under
  // the data roots; each refusal names the field, the path and her area.
  for (const std::string& path : {bobs_ckpt, Area("bob") + "/run1", dir_.Sub("ckpt")}) {
    SCOPED_TRACE(path);
    ExpectRefused(SubmitAs(t_.submitter_token, path), StatusCode::kInvalidArgument,
                  {field, path, Area("alice") + "/"});
  }
  // Nothing was made there.
  EXPECT_FALSE(PathExists(Area("bob")));

  // A folder in her own area is hers.
  auto mine = SubmitAs(t_.submitter_token, Area("alice") + "/run1");
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(mine->spec().training().checkpoint_dir(), Area("alice") + "/run1");
  // An admin is no exception: its own area, not alice's.
  ExpectRefused(SubmitAs(t_.admin_token, Area("alice") + "/run2"), StatusCode::kInvalidArgument,
                {field, Area("admin") + "/"});
}

TEST_F(CheckpointDirTest, ACheckpointRootBelongsToOneJob) {
  const std::string field = "spec.training.checkpoint_dir";
  auto first = SubmitAs(t_.submitter_token, Area("alice") + "/shared/run", "first");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Her second job may not use the same root, one inside it, or one holding it.
  for (const std::string& path :
       {Area("alice") + "/shared/run", Area("alice") + "/shared/run/",
        Area("alice") + "/shared/run/ckpt-r0-e1-s0", Area("alice") + "/shared"}) {
    SCOPED_TRACE(path);
    ExpectRefused(SubmitAs(t_.submitter_token, path), StatusCode::kFailedPrecondition,
                  {field, "job " + first->id()});
  }
  // The same request again is the same job, not a second claim.
  auto again = SubmitAs(t_.submitter_token, Area("alice") + "/shared/run", "first");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), first->id());

  // A root that a job claimed on disk (its owner marker; e.g. a job of an earlier
  // coordinator), or a folder inside one, is refused too.
  ASSERT_TRUE(MakeDirs(Area("alice") + "/old").ok());
  ASSERT_TRUE(WriteFileAtomically(Area("alice") + "/old/OWNER", "gone-7\n").ok());
  for (const std::string& path : {Area("alice") + "/old", Area("alice") + "/old/inner"}) {
    SCOPED_TRACE(path);
    ExpectRefused(SubmitAs(t_.submitter_token, path), StatusCode::kFailedPrecondition,
                  {field, "job gone-7"});
  }
  // A new folder beside them is fine.
  auto fresh = SubmitAs(t_.submitter_token, Area("alice") + "/run2");
  EXPECT_TRUE(fresh.ok()) << fresh.status().ToString();
}

// Rank 0 of a gang (a worker token, speaking the worker API itself) reports checkpoints: one
// outside the job's checkpoint root is not committed, and the job's history says so; one
// inside it is.
TEST_F(CheckpointDirTest, AReportedCheckpointOutsideTheJobsRootIsNotCommitted) {
  auto job = SubmitAs(t_.submitter_token, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto training = cluster_.WaitForState(job->id(), v1::JOB_STATE_TRAINING, seconds(60));
  ASSERT_TRUE(training.ok()) << training.status().ToString();
  ASSERT_EQ(training->state(), v1::JOB_STATE_TRAINING) << training->message();

  const std::string worker = "rank0";
  auto call = [&]() { return CallContext(t_.worker_token); };
  {
    v1::RegisterWorkerRequest request;
    request.set_name(worker);
    request.set_host("127.0.0.1");
    request.add_kinds(v1::ASSIGNMENT_KIND_TRAIN);
    v1::RegisterWorkerResponse response;
    grpc::Status st = bare_->RegisterWorker(call().get(), request, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  v1::Assignment a;
  for (int i = 0; i < 30 && a.kind() == v1::ASSIGNMENT_KIND_NONE; ++i) {
    v1::GetAssignmentRequest request;
    request.set_worker_id(worker);
    request.set_wait_seconds(1);
    request.set_rendezvous_port(PickFreePort());
    grpc::Status st = bare_->GetAssignment(call().get(), request, &a);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_EQ(a.kind(), v1::ASSIGNMENT_KIND_TRAIN);
  const std::string root = coord() + "/jobs/" + job->id() + "/ckpt";
  EXPECT_EQ(a.checkpoint_dir(), root);

  auto progress = [&](const std::string& checkpoint, int epoch) {
    v1::WorkerProgress p;
    p.set_epoch(epoch);
    p.set_step(3);
    p.set_steps_per_epoch(3);
    p.set_total_steps(3 * (epoch + 1));
    p.set_checkpoint(checkpoint);
    p.set_checkpoint_round(0);
    p.set_checkpoint_epoch(epoch);
    p.set_checkpoint_step(3);
    p.set_checkpoint_global_step(3 * (epoch + 1));
    p.set_checkpoint_epoch_complete(true);
    return p;
  };
  auto heartbeat = [&](const std::string& checkpoint, int epoch) {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_assignment_id(a.id());
    *request.mutable_progress() = progress(checkpoint, epoch);
    v1::HeartbeatResponse response;
    grpc::Status st = bare_->Heartbeat(call().get(), request, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return response;
  };
  // Elsewhere: another job's folder, the root itself, a path that climbs out of it.
  const std::vector<std::string> outside = {coord() + "/jobs/other-1/ckpt/ckpt-r0-e0-s3", root,
                                            root + "/../../other-1/ckpt/ckpt-r0-e0-s3",
                                            root + "-evil/ckpt-r0-e0-s3", "/etc"};
  for (const auto& path : outside) {
    SCOPED_TRACE(path);
    v1::HeartbeatResponse response = heartbeat(path, 0);
    EXPECT_EQ(response.committed_checkpoint(), "");
  }
  auto after = cluster_.Get(job->id(), /*history=*/true);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->checkpoint(), "");
  ASSERT_EQ(after->rounds_size(), 1);
  EXPECT_EQ(after->rounds(0).epochs_committed(), 0);
  int refused = 0;
  for (const auto& h : after->history()) {
    EXPECT_NE(h.kind(), "epoch_committed") << h.message();
    if (h.kind() != "checkpoint_refused") continue;
    ++refused;
    EXPECT_NE(h.message().find("not inside the job's checkpoint folder " + root + "/"),
              std::string::npos)
        << h.message();
  }
  EXPECT_EQ(refused, static_cast<int>(outside.size()));

  // A checkpoint inside the root is committed; a final report naming one outside is not.
  const std::string good = root + "/ckpt-r0-e0-s3";
  EXPECT_EQ(heartbeat(good, 0).committed_checkpoint(), good);
  {
    v1::ReportAssignmentRequest request;
    request.set_worker_id(worker);
    request.set_assignment_id(a.id());
    request.set_succeeded(true);
    *request.mutable_progress() = progress("/etc/ckpt-r0-e1-s3", 1);
    v1::ReportAssignmentResponse response;
    grpc::Status st = bare_->ReportAssignment(call().get(), request, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  auto last = cluster_.Get(job->id());
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->checkpoint(), good);
  ASSERT_EQ(last->rounds_size(), 1);
  EXPECT_EQ(last->rounds(0).checkpoint(), good);
  EXPECT_EQ(last->rounds(0).epochs_committed(), 1);
}

}  // namespace
}  // namespace mlcd::testing
