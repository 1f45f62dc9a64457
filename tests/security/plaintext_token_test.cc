// A bearer token goes only over TLS (docs/security.md, "Transport"): without --tls-ca a
// client refuses to send its token, except in plaintext to a loopback address when told
// --insecure (mlcdctl) or MLCD_INSECURE_TOKEN=1. The refusal happens when the channel is
// made, before it connects. Checked on this process's own channels, and with mlcdctl
// against a real mlcd-labelstore serving plaintext on loopback with a tokens file.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/grpc_server.h"
#include "common/net.h"
#include "common/security.h"
#include "mlcd/v1/coordinator.grpc.pb.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/testing/process.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

// The environment of an mlcdctl that finds no TLS and no opt-in there.
const std::vector<std::string> kNoTlsEnv = {
    "MLCD_TLS_CERT=", "MLCD_TLS_KEY=", "MLCD_TLS_CA=", "MLCD_TOKEN_FILE=", "MLCD_INSECURE_TOKEN="};

// This process as a client without TLS, sending the viewer token.
Status UsePlaintextWithToken(bool insecure_token) {
  SecurityOptions options;
  options.token_file = TestCerts().viewer_token_file;
  options.insecure_token = insecure_token;
  return ConfigureSecurity(options);
}

grpc::Status ListLabelSets(const std::string& address) {
  grpc::ChannelArguments args;
  auto stub = v1::LabelStore::NewStub(CreateSecureChannel(address, args));
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(seconds(20)));
  v1::ListLabelSetsResponse response;
  return stub->ListLabelSets(&context, v1::ListLabelSetsRequest(), &response);
}

// Streams on a refused channel: writes and reads fail at once and Finish is the refusal.
void ExpectStreamsRefused(const std::string& address) {
  grpc::ChannelArguments args;
  auto channel = CreateSecureChannel(address, args);
  {
    auto stub = v1::LabelStore::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(seconds(20)));
    v1::WriteLabelsResponse response;
    auto writer = stub->WriteLabels(&context, &response);
    EXPECT_FALSE(writer->Write(v1::WriteLabelsRequest()));
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  auto stub = v1::Coordinator::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(seconds(20)));
  auto reader = stub->WatchJob(&context, v1::WatchJobRequest());
  v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_IDLE) << "the refused channel connected";
}

class PlaintextTokenTest : public ::testing::Test {
 protected:
  void TearDown() override { ASSERT_TRUE(ConfigureSecurity(SecurityOptions()).ok()); }

  // A label store on loopback in plaintext that checks tokens (TestCerts' tokens file).
  void StartPlaintextStore() {
    address_ = "127.0.0.1:" + std::to_string(PickFreePort());
    std::vector<std::string> env = kNoTlsEnv;
    env.push_back("MLCD_TOKENS_FILE=" + TestCerts().tokens_file);
    Status started = StartLabelstore(&server_, address_, dir_, env);
    ASSERT_TRUE(started.ok()) << started.ToString() << "\n" << server_.Log();
  }

  // Runs mlcdctl with `args` in front of `labels list`, no TLS and no opt-in in its
  // environment besides `env`; returns its exit code.
  int Mlcdctl(std::vector<std::string> args, std::string* out,
              const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), "--labelstore=" + address_);
    args.insert(args.end(), {"labels", "list"});
    std::vector<std::string> full_env = kNoTlsEnv;
    full_env.insert(full_env.end(), env.begin(), env.end());
    return RunCommand(BinPath("mlcdctl"), args, out, full_env, seconds(60));
  }

  TempDir dir_;
  std::string address_;
  ChildProcess server_;
};

// No network is needed: the channel refuses before it connects. 192.0.2.1 is TEST-NET-1,
// where nothing answers: a call that tried to connect would run into its deadline.
TEST_F(PlaintextTokenTest, TokenToANonLoopbackAddressIsRefusedWithoutConnecting) {
  for (bool insecure_token : {false, true}) {
    SCOPED_TRACE(insecure_token ? "with the opt-in" : "without the opt-in");
    ASSERT_TRUE(UsePlaintextWithToken(insecure_token).ok());
    for (const std::string address :
         {"192.0.2.1:7610", "10.1.2.3:7600", "mlcd-labelstore:7610", "dns:///127.0.0.1:7610"}) {
      Status check = CheckChannelSecurity(address);
      EXPECT_EQ(check.code(), StatusCode::kFailedPrecondition) << address;
      EXPECT_NE(check.message().find("refusing to send the bearer token"), std::string::npos)
          << check.message();
      EXPECT_NE(check.message().find("--tls-ca"), std::string::npos) << check.message();
      EXPECT_NE(check.message().find("only to a loopback address"), std::string::npos)
          << check.message();
    }
    const auto start = std::chrono::steady_clock::now();
    grpc::Status call = ListLabelSets("192.0.2.1:7610");
    EXPECT_EQ(call.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << call.error_message();
    EXPECT_NE(call.error_message().find("in plaintext to 192.0.2.1:7610"), std::string::npos)
        << call.error_message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
    ExpectStreamsRefused("192.0.2.1:7600");
  }
  // Without a token, or with TLS, nothing is refused.
  ASSERT_TRUE(ConfigureSecurity(SecurityOptions()).ok());
  EXPECT_TRUE(CheckChannelSecurity("192.0.2.1:7610").ok());
  SecurityOptions tls;
  tls.tls.ca = TestCerts().ca.cert;
  tls.token_file = TestCerts().viewer_token_file;
  ASSERT_TRUE(ConfigureSecurity(tls).ok());
  EXPECT_TRUE(CheckChannelSecurity("192.0.2.1:7610").ok());
}

TEST_F(PlaintextTokenTest, TokenToLoopbackInPlaintextNeedsTheOptIn) {
  StartPlaintextStore();
  ASSERT_TRUE(UsePlaintextWithToken(false).ok());
  grpc::Status refused = ListLabelSets(address_);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--insecure"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("MLCD_INSECURE_TOKEN=1"), std::string::npos)
      << refused.error_message();
  // Opted in: the token reaches the store, which checks it (a viewer may list).
  ASSERT_TRUE(UsePlaintextWithToken(true).ok());
  grpc::Status sent = ListLabelSets(address_);
  EXPECT_TRUE(sent.ok()) << sent.error_message() << "\n" << server_.Log();
  for (const std::string address : {"localhost:1", "127.0.0.2:1", "[::1]:1"})
    EXPECT_TRUE(CheckChannelSecurity(address).ok()) << address;
}

TEST_F(PlaintextTokenTest, MlcdctlRefusesATokenInPlaintextUnlessInsecureOnLoopback) {
  StartPlaintextStore();
  const std::string token = "--token-file=" + TestCerts().viewer_token_file;
  std::string out;
  // A token and no --tls-ca: refused before anything is sent, exit 5, saying what to pass.
  EXPECT_EQ(Mlcdctl({token}, &out), 5) << out;
  EXPECT_NE(out.find("error: FAILED_PRECONDITION: refusing to send the bearer token (--token-file "
                     "/ MLCD_TOKEN_FILE) "
                     "in plaintext to " +
                     address_),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("give --tls-ca"), std::string::npos) << out;
  EXPECT_NE(out.find("pass --insecure"), std::string::npos) << out;
  // --insecure on loopback: sent, with a warning that says so.
  EXPECT_EQ(Mlcdctl({token, "--insecure"}, &out), 0) << out << "\n" << server_.Log();
  EXPECT_NE(out.find("sending the bearer token in plaintext to loopback address " + address_),
            std::string::npos)
      << out;
  // The environment's opt-in does the same.
  EXPECT_EQ(Mlcdctl({token}, &out, {"MLCD_INSECURE_TOKEN=1"}), 0) << out;
  // No token: nothing to protect, the call goes and the store asks for a token (exit 8).
  EXPECT_EQ(Mlcdctl({}, &out), 8) << out;
  // --insecure is no opt-in off loopback.
  out.clear();
  EXPECT_EQ(RunCommand(BinPath("mlcdctl"),
                       {"--labelstore=192.0.2.1:7610", token, "--insecure", "--timeout=20",
                        "labels", "list"},
                       &out, kNoTlsEnv, seconds(60)),
            5)
      << out;
  EXPECT_NE(out.find("only to a loopback address"), std::string::npos) << out;
}

}  // namespace
}  // namespace mlcd::testing
