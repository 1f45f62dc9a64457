// Label-set ownership (docs/security.md, "Label-set ownership") on a real
// label store and clusterd with TLS and tokens on: two submitters (alice, bob), a viewer
// (carol) and an admin against each other's sets, clusterd's Assign acting for its caller (a
// submitter can no longer replace another's sealed set through it), a job's sets, which
// only a service acting for that job changes, and the sets a job may train on.
#include <gtest/gtest.h>

#include "clients/write_capability.h"
#include "common/acting_for.h"
#include "common/clock.h"
#include "common/grpc_server.h"
#include "common/npy.h"
#include "common/security.h"
#include "mlcd/v1/clusterd.grpc.pb.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/coordinator/harness.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using grpc::StatusCode;

constexpr int kRows = 64, kDim = 8, kClasses = 4;

class LabelOwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartLabelstore().ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.StartClusterd().ok()) << cluster_.Logs();
    // Channels without this process's token interceptor: each call brings its own token.
    grpc::ChannelArguments args;
    store_ = v1::LabelStore::NewStub(
        grpc::CreateCustomChannel(cluster_.labelstore_address(), ChannelCredentials(), args));
    clusterd_ = v1::Clusterd::NewStub(
        grpc::CreateCustomChannel(cluster_.clusterd_address(), ChannelCredentials(), args));
    std::vector<float> features(kRows * kDim), centroids(kClasses * kDim, 0.f);
    for (int i = 0; i < kRows * kDim; ++i) features[i] = static_cast<float>((i * 37) % 11) - 5.f;
    for (int c = 0; c < kClasses; ++c) centroids[c * kDim + c] = 1.f;
    features_ = dir_.path() + "/features.npy";
    centroids_ = dir_.path() + "/centroids.npy";
    ASSERT_TRUE(WriteNpy(features_, NpyDtype::kFloat32, {kRows, kDim}, features.data()).ok());
    ASSERT_TRUE(WriteNpy(centroids_, NpyDtype::kFloat32, {kClasses, kDim}, centroids.data()).ok());
  }

  grpc::Status Create(const std::string& token, const std::string& name,
                      const ActingFor& acting = {}) {
    v1::CreateLabelSetRequest request;
    request.set_name(name);
    request.set_num_classes(kClasses);
    request.set_labels_per_sample(1);
    v1::LabelSetInfo info;
    return store_->CreateLabelSet(CallContext(token, acting).get(), request, &info);
  }

  // One row (sample 7 -> `label`), as `token`, with `capability` in the call's metadata
  // when given.
  grpc::Status Write(const std::string& token, const std::string& name,
                     const ActingFor& acting = {}, const std::string& capability = "",
                     int32_t label = 1) {
    auto ctx = CallContext(token, acting);
    if (!capability.empty()) ctx->AddMetadata(labelstore::kWriteCapabilityHeader, capability);
    v1::WriteLabelsResponse response;
    auto stream = store_->WriteLabels(ctx.get(), &response);
    v1::WriteLabelsRequest message;
    message.set_name(name);
    message.add_sample_ids(7);
    message.add_labels(label);
    stream->Write(message);
    stream->WritesDone();
    return stream->Finish();
  }

  grpc::Status Delegate(const std::string& token, const std::string& name,
                        v1::DelegateWritesResponse* response, const ActingFor& acting = {}) {
    v1::DelegateWritesRequest request;
    request.set_name(name);
    return store_->DelegateWrites(CallContext(token, acting).get(), request, response);
  }

  // A capability for `holder` minted from `delegation`, expiring `seconds` from now.
  static std::string Capability(const v1::DelegateWritesResponse& delegation,
                                const std::string& holder, int64_t seconds = 600) {
    StatusOr<std::string> cap = labelstore::MintWriteCapability(
        delegation.delegation_key(), delegation.name(), delegation.incarnation(),
        NowUnixMs() / 1000 + seconds, holder);
    EXPECT_TRUE(cap.ok()) << cap.status().ToString();
    return cap.ok() ? *cap : "";
  }

  int32_t LabelOfSeven(const std::string& name) {
    v1::GetLabelsRequest read;
    read.set_name(name);
    read.add_sample_ids(7);
    v1::GetLabelsResponse labels;
    grpc::Status st = store_->GetLabels(CallContext(t_.viewer_token).get(), read, &labels);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return labels.labels_size() > 0 ? labels.labels(0) : -2;
  }

  grpc::Status Seal(const std::string& token, const std::string& name,
                    const ActingFor& acting = {}) {
    v1::SealLabelSetRequest request;
    request.set_name(name);
    v1::LabelSetInfo info;
    return store_->SealLabelSet(CallContext(token, acting).get(), request, &info);
  }

  grpc::Status Delete(const std::string& token, const std::string& name) {
    v1::DeleteLabelSetRequest request;
    request.set_name(name);
    v1::DeleteLabelSetResponse response;
    return store_->DeleteLabelSet(CallContext(token).get(), request, &response);
  }

  v1::LabelSetInfo Describe(const std::string& name) {
    v1::DescribeLabelSetRequest request;
    request.set_name(name);
    v1::LabelSetInfo info;
    grpc::Status st = store_->DescribeLabelSet(CallContext(t_.viewer_token).get(), request, &info);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return info;
  }

  // clusterd's Assign of the test features into `name`, as `token`.
  grpc::Status Assign(const std::string& token, const std::string& name, bool replace) {
    v1::AssignRequest request;
    request.mutable_features()->add_paths(features_);
    request.set_centroids_path(centroids_);
    request.set_l(2);
    request.set_label_set(name);
    request.set_replace_existing(replace);
    auto ctx = CallContext(token);
    auto reader = clusterd_->Assign(ctx.get(), request);
    v1::AssignProgress progress;
    while (reader->Read(&progress)) {
    }
    return reader->Finish();
  }

  // A refusal naming the set, its owner and the caller.
  static void ExpectRefused(const grpc::Status& st, const std::string& set,
                            const std::string& owner, const std::string& caller) {
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
    for (const std::string& part : {set, owner, caller})
      EXPECT_NE(st.error_message().find(part), std::string::npos)
          << "'" << part << "' not in: " << st.error_message();
  }

  TempDir dir_;
  TestCluster cluster_{dir_};
  const TestSecurity& t_ = TestCerts();
  std::unique_ptr<v1::LabelStore::Stub> store_;
  std::unique_ptr<v1::Clusterd::Stub> clusterd_;
  std::string features_, centroids_;
};

TEST_F(LabelOwnershipTest, OnlyTheOwnerOrAnAdminChangesASet) {
  const std::string set = "alice/open";
  ASSERT_TRUE(Create(t_.submitter_token, set).ok());
  EXPECT_EQ(Describe(set).owner(), "token:alice");

  // Another submitter may not write into, seal or delete alice's open set; a viewer may not
  // either (by role).
  ExpectRefused(Write(t_.submitter2_token, set), set, "token:alice", "token:bob");
  ExpectRefused(Seal(t_.submitter2_token, set), set, "token:alice", "token:bob");
  ExpectRefused(Delete(t_.submitter2_token, set), set, "token:alice", "token:bob");
  EXPECT_EQ(Write(t_.viewer_token, set).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Delete(t_.viewer_token, set).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Describe(set).num_samples(), 0u);

  // The owner writes and seals; every reader still reads.
  EXPECT_TRUE(Write(t_.submitter_token, set).ok());
  EXPECT_TRUE(Seal(t_.submitter_token, set).ok());
  v1::GetLabelsRequest read;
  read.set_name(set);
  read.add_sample_ids(7);
  v1::GetLabelsResponse labels;
  ASSERT_TRUE(store_->GetLabels(CallContext(t_.viewer_token).get(), read, &labels).ok());
  EXPECT_EQ(labels.labels(0), 1);

  // The owner deletes its own set (DeleteLabelSet is no longer admin-only).
  EXPECT_TRUE(Delete(t_.submitter_token, set).ok());

  // An admin writes, seals and deletes anyone's set.
  ASSERT_TRUE(Create(t_.submitter2_token, "bob/set").ok());
  EXPECT_TRUE(Write(t_.admin_token, "bob/set").ok());
  EXPECT_TRUE(Seal(t_.admin_token, "bob/set").ok());
  EXPECT_TRUE(Delete(t_.admin_token, "bob/set").ok());
}

TEST_F(LabelOwnershipTest, ClusterdAssignActsForItsCallerNotForItself) {
  // Alice's sealed set, made through clusterd: owned by alice, not by clusterd.
  const std::string set = "alice/sealed";
  grpc::Status made = Assign(t_.submitter_token, set, false);
  ASSERT_TRUE(made.ok()) << made.error_message() << cluster_.Logs();
  const v1::LabelSetInfo before = Describe(set);
  EXPECT_EQ(before.owner(), "token:alice");
  EXPECT_EQ(before.state(), v1::LABEL_SET_STATE_SEALED);

  // The confused deputy: bob asks clusterd to replace alice's sealed set.
  ExpectRefused(Assign(t_.submitter2_token, set, true), set, "token:alice", "token:bob");
  const v1::LabelSetInfo after = Describe(set);
  EXPECT_EQ(after.created_unix_ms(), before.created_unix_ms());
  EXPECT_EQ(after.num_samples(), static_cast<uint64_t>(kRows));

  // Alice replaces her own; a user cannot claim to act for someone else.
  EXPECT_TRUE(Assign(t_.submitter_token, set, true).ok());
  v1::DeleteLabelSetRequest request;
  request.set_name(set);
  v1::DeleteLabelSetResponse response;
  grpc::Status claimed = store_->DeleteLabelSet(
      CallContext(t_.submitter2_token, ActingFor{"token:alice", Role::kSubmitter}).get(), request,
      &response);
  EXPECT_EQ(claimed.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(claimed.error_message().find("only a service"), std::string::npos)
      << claimed.error_message();
  EXPECT_EQ(Describe(set).owner(), "token:alice");
}

TEST_F(LabelOwnershipTest, AJobsSetsAreChangedOnlyForThatJob) {
  const std::string set = "job/j1/r0";
  const ActingFor job = ActingForJob("j1");
  // Users cannot make (squat) a job's set, directly or through clusterd.
  EXPECT_EQ(Create(t_.submitter_token, set).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Create(t_.admin_token, set).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Assign(t_.submitter_token, set, true).error_code(), StatusCode::PERMISSION_DENIED);
  // A service acting for another job cannot either.
  EXPECT_EQ(Create("", set, ActingForJob("j2")).error_code(), StatusCode::PERMISSION_DENIED);

  // The coordinator's phases (a service acting for job j1) make and fill it.
  ASSERT_TRUE(Create("", set, job).ok());
  EXPECT_EQ(Describe(set).owner(), "job:j1");
  EXPECT_TRUE(Write("", set, job).ok());

  // Nobody else changes it: not a submitter, not through clusterd, not an admin's write.
  ExpectRefused(Write(t_.submitter_token, set), set, "job:j1", "token:alice");
  ExpectRefused(Seal(t_.submitter2_token, set), set, "job:j1", "token:bob");
  ExpectRefused(Delete(t_.submitter_token, set), set, "job:j1", "token:alice");
  ExpectRefused(Assign(t_.submitter2_token, set, true), set, "job:j1", "token:bob");
  ExpectRefused(Write(t_.admin_token, set), set, "job:j1", "token:admin");
  ExpectRefused(Write("", set, ActingForJob("j2")), set, "job:j1", "job:j2");
  EXPECT_EQ(Describe(set).num_samples(), 1u);

  // A worker identity by itself neither writes, makes, seals nor deletes a job's set, nor
  // writes a user's (a gang's ranks write with capabilities: the test below).
  ExpectRefused(Write(t_.worker_token, set), set, "job:j1", "worker-a");
  EXPECT_EQ(Seal(t_.worker_token, set).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Delete(t_.worker_token, set).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Create(t_.worker_token, "job/j3/r0").error_code(), StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Create(t_.submitter_token, "alice/own").ok());
  ExpectRefused(Write(t_.worker_token, "alice/own"), "alice/own", "token:alice", "worker-a");

  EXPECT_TRUE(Seal("", set, job).ok());
  // A sealed set takes no more rows, from anyone.
  EXPECT_FALSE(Write("", set, job).ok());
  // An admin may clean it up.
  EXPECT_TRUE(Delete(t_.admin_token, set).ok());
}

TEST_F(LabelOwnershipTest, AJobsRowsAreWrittenOnlyWithTheCapabilityItsOwnerIssued) {
  const std::string set = "job/j1/r0", other = "job/j2/r0";
  const ActingFor job = ActingForJob("j1");
  ASSERT_TRUE(Create("", set, job).ok());
  ASSERT_TRUE(Create("", other, ActingForJob("j2")).ok());

  // A stray worker token (it never registered a worker, let alone joined the job's gang)
  // waits for the OPEN set and writes its rows: refused, as is a service that is not the job.
  ExpectRefused(Write(t_.worker_token, set, {}, "", 3), set, "job:j1", "worker-a");
  ExpectRefused(Write(t_.worker2_token, set, {}, "", 3), set, "job:j1", "worker-b");
  EXPECT_EQ(Write("", set).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Describe(set).num_samples(), 0u);

  // Only whoever may write the set by ownership gets its delegation: the job (through a
  // service acting for it). Not a worker, a submitter, an admin of another's set, nor another
  // job.
  v1::DelegateWritesResponse delegation, refused;
  EXPECT_EQ(Delegate(t_.worker_token, set, &refused).error_code(), StatusCode::PERMISSION_DENIED);
  ExpectRefused(Delegate(t_.submitter_token, set, &refused), set, "job:j1", "token:alice");
  EXPECT_EQ(Delegate("", set, &refused, ActingForJob("j2")).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Delegate(t_.viewer_token, set, &refused).error_code(), StatusCode::PERMISSION_DENIED);
  grpc::Status delegated = Delegate("", set, &delegation, job);
  ASSERT_TRUE(delegated.ok()) << delegated.error_message();
  EXPECT_EQ(delegation.name(), set);
  EXPECT_EQ(delegation.delegation_key().size(), 32u);

  // The rank's capability writes the set, whatever the identity that carries it.
  const std::string rank1 = Capability(delegation, "job:j1/r0/assign_labels/rank1");
  grpc::Status written = Write(t_.worker_token, set, {}, rank1, 2);
  ASSERT_TRUE(written.ok()) << written.error_message();
  EXPECT_EQ(LabelOfSeven(set), 2);

  // It writes nothing else: not another job's set, not a user's.
  grpc::Status elsewhere = Write(t_.worker_token, other, {}, rank1, 3);
  EXPECT_EQ(elsewhere.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(elsewhere.error_message().find(other), std::string::npos) << elsewhere.error_message();
  ASSERT_TRUE(Create(t_.submitter_token, "alice/own").ok());
  EXPECT_EQ(Write(t_.worker_token, "alice/own", {}, rank1, 3).error_code(),
            StatusCode::PERMISSION_DENIED);

  // A forged, altered or expired capability grants nothing, and neither does the holder text.
  std::string altered = rank1;
  altered[altered.size() - 1] = altered.back() == 'a' ? 'b' : 'a';
  EXPECT_EQ(Write(t_.worker_token, set, {}, altered, 3).error_code(),
            StatusCode::PERMISSION_DENIED);
  grpc::Status expired =
      Write(t_.worker_token, set, {}, Capability(delegation, "job:j1/r0/late", -10), 3);
  EXPECT_EQ(expired.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(expired.error_message().find("expired"), std::string::npos) << expired.error_message();
  EXPECT_EQ(Write(t_.worker_token, set, {}, "mlcdcap1|1|9999999999|job:j1|x", 3).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(LabelOfSeven(set), 2);

  // The capability still verifies after the label store restarts (its secret is stored).
  ASSERT_TRUE(cluster_.RestartLabelstore().ok()) << cluster_.Logs();
  // (fresh channels reconnect on their own: the stub is reused)
  written = Write(t_.worker_token, set, {}, rank1, 1);
  EXPECT_TRUE(written.ok()) << written.error_message();

  // The set made again under the same name is a new incarnation: the old capability is dead.
  ASSERT_TRUE(Delete(t_.admin_token, set).ok());
  ASSERT_TRUE(Create("", set, job).ok());
  grpc::Status stale = Write(t_.worker_token, set, {}, rank1, 3);
  EXPECT_EQ(stale.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(stale.error_message().find("earlier"), std::string::npos) << stale.error_message();

  // Once sealed, no capability writes and none is delegated.
  ASSERT_TRUE(Delegate("", set, &delegation, job).ok());
  const std::string fresh = Capability(delegation, "job:j1/r0/assign_labels/rank0");
  ASSERT_TRUE(Write(t_.worker_token, set, {}, fresh, 1).ok());
  ASSERT_TRUE(Seal("", set, job).ok());
  EXPECT_EQ(Write(t_.worker_token, set, {}, fresh, 3).error_code(),
            StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Delegate("", set, &refused, job).error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(LabelOfSeven(set), 1);
}

// A job trains only on a label set its submitter controls (docs/security.md, "Bindings"):
// alice's sealed set is refused to bob and taken for alice and for an admin.
TEST_F(LabelOwnershipTest, AJobTrainsOnlyOnASetItsSubmitterOwns) {
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
  const std::string set = "alice/tags";
  ASSERT_TRUE(Create(t_.submitter_token, set).ok());
  TinyJob spec;  // 384 images, world size 2
  spec.k = 0;
  spec.l = 0;
  spec.clustering_fields = "label_set: " + set;
  {
    auto ctx = CallContext(t_.submitter_token);
    v1::WriteLabelsResponse response;
    auto stream = store_->WriteLabels(ctx.get(), &response);
    v1::WriteLabelsRequest message;
    message.set_name(set);
    for (int i = 0; i < spec.limit; ++i) {
      message.add_sample_ids(i);
      message.add_labels(i % kClasses);
    }
    ASSERT_TRUE(stream->Write(message));
    stream->WritesDone();
    grpc::Status written = stream->Finish();
    ASSERT_TRUE(written.ok()) << written.error_message();
  }
  ASSERT_TRUE(Seal(t_.submitter_token, set).ok());

  auto coordinator = v1::Coordinator::NewStub(TokenlessChannel(cluster_.coordinator_address()));
  auto submit = [&](const std::string& token) {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(spec.Yaml());
    request.set_dry_run(true);
    v1::Job job;
    return coordinator->SubmitJob(CallContext(token).get(), request, &job);
  };
  ExpectRefused(submit(t_.submitter2_token), set, "token:alice", "token:bob");
  grpc::Status own = submit(t_.submitter_token);
  EXPECT_TRUE(own.ok()) << own.error_message();
  grpc::Status admin = submit(t_.admin_token);
  EXPECT_TRUE(admin.ok()) << admin.error_message();
}

}  // namespace
}  // namespace mlcd::testing
