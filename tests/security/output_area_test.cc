// Output areas (docs/hardening.md, "Outputs") on a real clusterd with TLS
// and tokens, started as tests/coordinator/harness.cc starts it: the data roots hold the
// whole test folder (the coordinator's database included), and `--output-root` is the
// coordinator's folder. Before, a submitter's Cluster call wrote centroids_out anywhere under
// the roots: over another user's checkpoint, or the coordinator's database CURRENT. Now a
// caller writes only inside its own area, a job's phases only in the job's folder, and
// nothing under the output root but the areas is read or written.
#include <gtest/gtest.h>

#include "common/acting_for.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/npy.h"
#include "common/security.h"
#include "mlcd/v1/clusterd.grpc.pb.h"
#include "tests/coordinator/harness.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using grpc::StatusCode;

constexpr int kRows = 64, kDim = 8, kClasses = 4;

class OutputAreaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartLabelstore().ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.StartClusterd().ok()) << cluster_.Logs();
    grpc::ChannelArguments args;
    clusterd_ = v1::Clusterd::NewStub(
        grpc::CreateCustomChannel(cluster_.clusterd_address(), ChannelCredentials(), args));
    std::vector<float> features(kRows * kDim);
    for (int i = 0; i < kRows * kDim; ++i) features[i] = static_cast<float>((i * 37) % 11) - 5.f;
    features_ = dir_.path() + "/features.npy";
    ASSERT_TRUE(WriteNpy(features_, NpyDtype::kFloat32, {kRows, kDim}, features.data()).ok());
    // What a submitter must not replace: the coordinator's database and another user's file.
    ASSERT_TRUE(MakeDirs(coord() + "/db").ok());
    ASSERT_TRUE(WriteFileAtomically(coord() + "/db/CURRENT", "MANIFEST-000004\n").ok());
    ASSERT_TRUE(MakeDirs(dir_.path() + "/ckpt").ok());
    ASSERT_TRUE(WriteFileAtomically(dir_.path() + "/ckpt/LATEST", "epoch-3\n").ok());
  }

  std::string coord() const { return cluster_.coordinator_data_dir(); }

  // A Cluster call (k = kClasses) writing to `out`, as `token` (acting for `acting`).
  grpc::Status Cluster(const std::string& token, const std::string& out,
                       const ActingFor& acting = {}) {
    v1::ClusterRequest request;
    request.mutable_features()->add_paths(features_);
    request.set_k(kClasses);
    request.set_niter(2);
    request.set_centroids_out(out);
    return Run(token, request, acting);
  }

  // `request` sent to clusterd as `token`, its progress read to the end.
  grpc::Status Run(const std::string& token, const v1::ClusterRequest& request,
                   const ActingFor& acting = {}) {
    auto ctx = CallContext(token, acting, std::chrono::seconds(60));
    auto reader = clusterd_->Cluster(ctx.get(), request);
    v1::ClusterProgress progress;
    while (reader->Read(&progress)) {
    }
    return reader->Finish();
  }

  static void ExpectRefused(const grpc::Status& st, const std::string& field,
                            const std::string& area) {
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
    for (const std::string& part : {field, area})
      EXPECT_NE(st.error_message().find(part), std::string::npos)
          << "'" << part << "' not in: " << st.error_message();
  }

  TempDir dir_;
  TestCluster cluster_{dir_};
  const TestSecurity& t_ = TestCerts();
  std::unique_ptr<v1::Clusterd::Stub> clusterd_;
  std::string features_;
};

TEST_F(OutputAreaTest, ASubmitterWritesOnlyInItsOwnArea) {
  const std::string alice = coord() + "/users/token/alice";
  const std::string bob = coord() + "/users/token/bob";
  // Her own area (made on demand): written.
  grpc::Status st = Cluster(t_.submitter_token, alice + "/r0/centroids.npy");
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(PathExists(alice + "/r0/centroids.npy"));

  // Elsewhere under the data roots, over another user's checkpoint: refused, nothing changed,
  // and the refusal names her area.
  ExpectRefused(Cluster(t_.submitter_token, dir_.path() + "/ckpt/LATEST"), "centroids_out", alice);
  EXPECT_EQ(*ReadFileToString(dir_.path() + "/ckpt/LATEST"), "epoch-3\n");
  ExpectRefused(Cluster(t_.submitter_token, dir_.path() + "/new.npy"), "centroids_out", alice);
  EXPECT_FALSE(PathExists(dir_.path() + "/new.npy"));

  // Bob cannot replace alice's file, nor write into a job's folder or the shared features.
  ExpectRefused(Cluster(t_.submitter2_token, alice + "/r0/centroids.npy"), "centroids_out", bob);
  ExpectRefused(Cluster(t_.submitter2_token, coord() + "/jobs/j1/r0/centroids.npy"),
                "centroids_out", bob);
  ExpectRefused(Cluster(t_.submitter2_token, coord() + "/features/x/features.npy"), "centroids_out",
                bob);
  // An admin is no exception: outputs are per identity.
  ExpectRefused(Cluster(t_.admin_token, alice + "/r0/centroids.npy"), "centroids_out",
                coord() + "/users/token/");
}

TEST_F(OutputAreaTest, TheCoordinatorsDatabaseBesideTheAreasIsNeverWritten) {
  // The data roots hold the whole test folder, the coordinator's db/ included; the output root
  // makes everything in it but the areas private, whoever calls.
  for (const std::string& token : {t_.submitter_token, t_.admin_token}) {
    grpc::Status st = Cluster(token, coord() + "/db/CURRENT");
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  grpc::Status st = Cluster("", coord() + "/db/CURRENT", ActingForJob("j1"));
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_EQ(*ReadFileToString(coord() + "/db/CURRENT"), "MANIFEST-000004\n");
  // Nor read: the database is no feature source.
  v1::ClusterRequest request;
  request.mutable_features()->add_paths(coord() + "/db/CURRENT");
  request.set_k(2);
  request.set_centroids_out(coord() + "/users/token/alice/c.npy");
  st = Run(t_.submitter_token, request);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
}

TEST_F(OutputAreaTest, AJobsPhasesWriteOnlyInTheJobsFolderAndTheSharedFeatures) {
  // The coordinator (a service, acting for job:j1) writes the job's centroids and round-0
  // features; into another job's folder it is refused like anyone.
  grpc::Status st = Cluster("", coord() + "/jobs/j1/r0/centroids.npy", ActingForJob("j1"));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(PathExists(coord() + "/jobs/j1/r0/centroids.npy"));
  ExpectRefused(Cluster("", coord() + "/jobs/j2/r0/centroids.npy", ActingForJob("j1")),
                "centroids_out", coord() + "/jobs/j1");

  // Generated features name their outputs too: a submitter's go in her area only.
  v1::ClusterRequest request;
  v1::GeneratedFeatures* g = request.mutable_features()->mutable_generate();
  g->set_kind("pixels");
  g->set_limit(200);
  g->set_features_out(coord() + "/features/fm/features.npy");
  request.set_k(2);
  request.set_centroids_out(coord() + "/users/token/alice/c.npy");
  ExpectRefused(Run(t_.submitter_token, request), "features.generate.features_out",
                coord() + "/users/token/alice");
  EXPECT_FALSE(PathExists(coord() + "/features/fm/features.npy"));
}

}  // namespace
}  // namespace mlcd::testing
