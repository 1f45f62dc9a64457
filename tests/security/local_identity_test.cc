// The local cluster's identities: `mlcdctl local up` hands users (its
// env file) a user certificate without service rights and a submitter token, never the
// services' certificate; tokens exist for viewer, submitter and admin. Real processes: the
// cluster is started by mlcdctl, and this test calls its label store with what env exports.
// And its data roots (finding 9): with `--data-root X` a job still writes its outputs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <sstream>

#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/security.h"
#include "common/tokens.h"
#include "mlcd/v1/clusterd.grpc.pb.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/testing/process.h"

namespace mlcd::testing {
namespace {

using grpc::StatusCode;

// NAME -> value of the "export NAME=value" lines of an env file.
std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> vars;
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  std::istringstream in(text.ok() ? *text : "");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("export ", 0) != 0) continue;
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(7, eq - 7)] = line.substr(eq + 1);
  }
  return vars;
}

std::string Token(const std::string& file) {
  auto token = ReadClientToken(file);
  EXPECT_TRUE(token.ok()) << token.status().ToString();
  return token.ok() ? *token : "";
}

class LocalIdentityTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::string out;
    RunCommand(BinPath("mlcdctl"), {"local", "down", "--dir", cluster_}, &out, {},
               std::chrono::seconds(60));
  }

  TempDir dir_;
  std::string cluster_ = dir_.Sub("local");
};

TEST_F(LocalIdentityTest, EnvGivesUsersAUserCertificateAndRoleTokensNotTheServiceCertificate) {
  std::string out;
  ASSERT_EQ(RunCommand(BinPath("mlcdctl"),
                       {"local", "up", "--workers", "0", "--ports", "auto", "--detach", "--dir",
                        cluster_, "--bin-dir", BinPath("")},
                       &out, {"MLCD_NO_BLAS_TUNING=1"}, std::chrono::seconds(120)),
            0)
      << out;
  const auto env = ReadEnvFile(cluster_ + "/env");
  const std::string tls = cluster_ + "/tls";
  ASSERT_TRUE(env.count("MLCD_TLS_CERT") && env.count("MLCD_TOKEN_FILE")) << out;
  EXPECT_EQ(env.at("MLCD_TLS_CERT"), tls + "/user.pem");
  EXPECT_EQ(env.at("MLCD_TLS_KEY"), tls + "/user.key");
  EXPECT_EQ(env.at("MLCD_TOKEN_FILE"), tls + "/submitter.token");
  for (const char* f : {"/viewer.token", "/submitter.token", "/admin.token"})
    EXPECT_TRUE(PathExists(tls + f)) << f;

  // This process as a user who sourced env: the user certificate, the cluster's CA.
  SecurityOptions user;
  user.tls = {env.at("MLCD_TLS_CERT"), env.at("MLCD_TLS_KEY"), env.at("MLCD_TLS_CA")};
  ASSERT_TRUE(ConfigureSecurity(user).ok());
  auto cluster = ReadFileToString(cluster_ + "/cluster.json");
  ASSERT_TRUE(cluster.ok());
  const std::string address = nlohmann::json::parse(*cluster).at("labelstore");
  grpc::ChannelArguments args;
  auto store =
      v1::LabelStore::NewStub(grpc::CreateCustomChannel(address, ChannelCredentials(), args));
  auto call = [&](const std::string& token, const std::string& name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(20)));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::CreateLabelSetRequest request;
    request.set_name(name);
    request.set_num_classes(4);
    request.set_labels_per_sample(1);
    v1::LabelSetInfo info;
    grpc::Status st = store->CreateLabelSet(&ctx, request, &info);
    return std::make_pair(st, info);
  };

  // The certificate alone is no identity: with the service certificate (what env exported
  // before) this call acted as role service and could create and delete any set.
  auto [bare, unused] = call("", "by-certificate");
  EXPECT_EQ(bare.error_code(), StatusCode::UNAUTHENTICATED) << bare.error_message();
  auto [viewer, unused2] = call(Token(tls + "/viewer.token"), "by-viewer");
  EXPECT_EQ(viewer.error_code(), StatusCode::PERMISSION_DENIED) << viewer.error_message();
  auto [submitter, info] = call(Token(env.at("MLCD_TOKEN_FILE")), "by-submitter");
  ASSERT_TRUE(submitter.ok()) << submitter.error_message();
  EXPECT_EQ(info.owner(), "token:local-submitter");
  auto [admin, admin_info] = call(Token(tls + "/admin.token"), "by-admin");
  ASSERT_TRUE(admin.ok()) << admin.error_message();
  EXPECT_EQ(admin_info.owner(), "token:local-admin");

  // Finding 4: the cluster's own files (CA, tokens, the coordinator's database) lie under the
  // working directory, a default root, but are private; a user's outputs go to its own area.
  const std::string clusterd_address = nlohmann::json::parse(*cluster).at("clusterd");
  auto clusterd = v1::Clusterd::NewStub(
      grpc::CreateCustomChannel(clusterd_address, ChannelCredentials(), args));
  auto cluster_call = [&](const std::string& out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(60)));
    ctx.AddMetadata("authorization", "Bearer " + Token(env.at("MLCD_TOKEN_FILE")));
    v1::ClusterRequest request;
    v1::GeneratedFeatures* g = request.mutable_features()->mutable_generate();
    g->set_kind("pixels");
    g->set_limit(300);
    g->set_features_out(cluster_ + "/coordinator/users/token/local-submitter/f/features.npy");
    request.set_k(4);
    request.set_niter(2);
    request.set_centroids_out(out);
    auto reader = clusterd->Cluster(&ctx, request);
    v1::ClusterProgress progress;
    while (reader->Read(&progress)) {
    }
    return reader->Finish();
  };
  const std::string ca_before = *ReadFileToString(tls + "/ca.pem");
  for (const std::string& target :
       {tls + "/ca.pem", tls + "/admin.token", cluster_ + "/coordinator/db/CURRENT",
        cluster_ + "/coordinator/jobs/other/r0/centroids.npy"}) {
    grpc::Status st = cluster_call(target);
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED)
        << target << ": " << st.error_message();
  }
  EXPECT_EQ(*ReadFileToString(tls + "/ca.pem"), ca_before);
  if (PathExists("/usr/share/datasets/fashion-mnist")) {
    const std::string own = cluster_ + "/coordinator/users/token/local-submitter/c.npy";
    grpc::Status st = cluster_call(own);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(PathExists(own));
  }
}

// `mlcdctl local up --data-root X`. Before: every job failed, because
// clusterd wrote each round's centroids to the coordinator's job folder, which lay under none
// of the roots X named. Now the local cluster makes the coordinator's job folders
// (<dir>/coordinator/jobs) a root of clusterd, the coordinator and the workers whatever
// --data-root says (its database beside them stays outside), and the tiny job runs to the end
// with TLS and tokens on.
TEST_F(LocalIdentityTest, ATinyJobRunsWithTheClustersOwnDataRoots) {
  ASSERT_TRUE(MakeDirs(dir_.Sub("data")).ok());
  std::string out;
  ASSERT_EQ(RunCommand(BinPath("mlcdctl"),
                       {"local", "up", "--workers", "2", "--ports", "auto", "--detach", "--dir",
                        cluster_, "--bin-dir", BinPath(""), "--data-root", dir_.Sub("data"),
                        "--data-root", "/usr/share/datasets"},
                       &out, {"MLCD_NO_BLAS_TUNING=1"}, std::chrono::seconds(120)),
            0)
      << out;
  std::vector<std::string> env;
  for (const auto& [name, value] : ReadEnvFile(cluster_ + "/env"))
    env.push_back(name + "=" + value);
  std::string job;
  const int rc = RunCommand(
      BinPath("mlcdctl"),
      {"submit", std::string(MLCD_SOURCE_DIR) + "/examples/tiny-test-job.yaml", "--wait"}, &job,
      env, std::chrono::seconds(240));
  auto log = ReadFileToString(cluster_ + "/logs/coordinator.log");
  EXPECT_EQ(rc, 0) << job << "\ncoordinator log:\n" << (log.ok() ? *log : std::string());
  EXPECT_NE(job.find("SUCCEEDED"), std::string::npos) << job;
  EXPECT_EQ(job.find("not under a data root"), std::string::npos) << job;
  // The worker agents (and so their children) hold the cluster's folder private too, as
  // clusterd and the coordinator do: no assignment reaches its tls/ or db/.
  for (const std::string worker : {"local-w0", "local-w1"}) {
    auto agent = ReadFileToString(cluster_ + "/logs/" + worker + ".log");
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    EXPECT_NE(agent->find("private, never read or written: " +
                          std::filesystem::canonical(cluster_).string()),
              std::string::npos)
        << *agent;
  }
}

}  // namespace
}  // namespace mlcd::testing
