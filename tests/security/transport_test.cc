// TLS on the wire: a TLS server refuses plaintext clients and clients of another CA, a
// server refuses to serve plaintext off loopback unless told --insecure, and SIGHUP reloads
// its certificate and its tokens.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "common/cert_maker.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/net.h"
#include "common/security.h"
#include "common/tls_config.h"
#include "common/tokens.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/testing/process.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(EnableTestSecurity().ok());
    address_ = "127.0.0.1:" + std::to_string(PickFreePort());
  }

  Status StartLabelstore(const std::vector<std::string>& env = {},
                         const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--listen", address_,     "--metrics-listen",
                                     "",         "--data-dir", dir_.Sub("labelstore")};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> full_env = NoTokenEnv();
    full_env.insert(full_env.end(), env.begin(), env.end());
    MLCD_RETURN_IF_ERROR(
        server_.Start(BinPath("mlcd-labelstore"), args, dir_.Sub("labelstore.log"), full_env));
    return WaitForServing(address_, seconds(30));
  }

  // ListLabelSets over `creds`, with `token` as bearer token when not empty.
  grpc::Status List(const std::shared_ptr<grpc::ChannelCredentials>& creds,
                    const std::string& token, std::string* peer_cn = nullptr) {
    auto stub = v1::LabelStore::NewStub(grpc::CreateChannel(address_, creds));
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(seconds(5)));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::ListLabelSetsResponse response;
    grpc::Status s = stub->ListLabelSets(&context, v1::ListLabelSetsRequest(), &response);
    if (peer_cn && context.auth_context()) {
      auto cn = context.auth_context()->FindPropertyValues("x509_common_name");
      if (!cn.empty()) *peer_cn = std::string(cn[0].data(), cn[0].size());
    }
    return s;
  }

  std::shared_ptr<grpc::ChannelCredentials> Creds(const TlsFiles& files) {
    auto config = TlsConfig::Open(files);
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    configs_.push_back(*config);
    return (*config)->ChannelCredentials();
  }

  TempDir dir_;
  std::string address_;
  ChildProcess server_;
  std::vector<std::shared_ptr<TlsConfig>> configs_;
};

TEST_F(TransportTest, PlaintextAndWrongCaClientsAreRefused) {
  ASSERT_TRUE(StartLabelstore().ok()) << server_.Log();
  const TestSecurity& t = TestCerts();
  // The right CA and a client certificate it signed: served.
  grpc::Status ok = List(Creds({t.server.cert, t.server.key, t.ca.cert}), t.viewer_token);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  // Plaintext to a TLS server: no handshake, no call.
  grpc::Status plain = List(grpc::InsecureChannelCredentials(), t.viewer_token);
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // A client that trusts another CA does not accept the server.
  grpc::Status wrong_ca =
      List(Creds({t.server.cert, t.server.key, t.other_ca.cert}), t.viewer_token);
  EXPECT_EQ(wrong_ca.error_code(), grpc::StatusCode::UNAVAILABLE) << wrong_ca.error_message();
  // A client certificate from another CA is not accepted by the server (mTLS).
  grpc::Status wrong_client = List(Creds({t.other.cert, t.other.key, t.ca.cert}), t.viewer_token);
  EXPECT_EQ(wrong_client.error_code(), grpc::StatusCode::UNAVAILABLE)
      << wrong_client.error_message();
  // No client certificate at all: refused too.
  grpc::Status no_client_cert = List(Creds({"", "", t.ca.cert}), t.viewer_token);
  EXPECT_EQ(no_client_cert.error_code(), grpc::StatusCode::UNAVAILABLE)
      << no_client_cert.error_message();
}

TEST_F(TransportTest, PlaintextOffLoopbackNeedsInsecure) {
  const std::vector<std::string> plaintext = {
      "MLCD_TLS_CERT=", "MLCD_TLS_KEY=", "MLCD_TLS_CA=", "MLCD_TOKENS_FILE="};
  address_ = "0.0.0.0:" + std::to_string(PickFreePort());
  ASSERT_TRUE(server_
                  .Start(BinPath("mlcd-labelstore"),
                         {"--listen", address_, "--metrics-listen", "", "--data-dir",
                          dir_.Sub("labelstore")},
                         dir_.Sub("refused.log"), plaintext)
                  .ok());
  const int status = server_.Wait(seconds(30));
  ASSERT_TRUE(WIFEXITED(status)) << server_.Log();
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(server_.Log().find("refusing plaintext gRPC on non-loopback address"),
            std::string::npos)
      << server_.Log();
  EXPECT_NE(server_.Log().find("--insecure"), std::string::npos) << server_.Log();

  // With --insecure it serves, and says what that means.
  ASSERT_TRUE(server_
                  .Start(BinPath("mlcd-labelstore"),
                         {"--listen", address_, "--metrics-listen", "", "--data-dir",
                          dir_.Sub("labelstore"), "--insecure"},
                         dir_.Sub("insecure.log"), plaintext)
                  .ok());
  std::string port = address_.substr(address_.find(':') + 1);
  std::string local = "127.0.0.1:" + port;
  address_ = local;
  for (int i = 0; i < 100 && !List(grpc::InsecureChannelCredentials(), "").ok(); ++i)
    std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(List(grpc::InsecureChannelCredentials(), "").ok()) << server_.Log();
  EXPECT_NE(server_.Log().find("--insecure: serving plaintext"), std::string::npos)
      << server_.Log();
}

TEST_F(TransportTest, SighupReloadsTheCertificateAndTheTokens) {
  const TestSecurity& t = TestCerts();
  const std::string cert = dir_.Sub("cert.pem"), key = dir_.Sub("key.pem");
  const std::string tokens = dir_.Sub("tokens");
  ASSERT_TRUE(WriteFileAtomically(cert, *ReadFileToString(t.server.cert)).ok());
  ASSERT_TRUE(WriteFileAtomically(key, *ReadFileToString(t.server.key)).ok());
  const std::string base_tokens = *ReadFileToString(t.tokens_file);
  ASSERT_TRUE(WriteFileAtomically(tokens, base_tokens).ok());
  ASSERT_TRUE(StartLabelstore(
                  {"MLCD_TLS_CERT=" + cert, "MLCD_TLS_KEY=" + key, "MLCD_TOKENS_FILE=" + tokens})
                  .ok())
      << server_.Log();
  auto creds = Creds({t.server.cert, t.server.key, t.ca.cert});
  const std::string fresh = *NewRandomToken();
  std::string cn;
  EXPECT_EQ(List(creds, fresh, &cn).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(List(creds, t.viewer_token, &cn).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(cn, "mlcd-test-service");

  // A new token and a new certificate, then SIGHUP.
  ASSERT_TRUE(WriteFileAtomically(tokens, base_tokens + fresh + " viewer dave\n").ok());
  auto renewed = IssueCert(t.ca, dir_.Sub("renewed"), "renewed", "mlcd-renewed",
                           {"IP:127.0.0.1", "DNS:localhost"});
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  ASSERT_TRUE(WriteFileAtomically(cert, *ReadFileToString(renewed->cert)).ok());
  ASSERT_TRUE(WriteFileAtomically(key, *ReadFileToString(renewed->key)).ok());
  server_.Signal(SIGHUP);
  bool token_ok = false, cert_ok = false;
  for (int i = 0; i < 100 && !(token_ok && cert_ok); ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    token_ok = List(creds, fresh).ok();
    cn.clear();
    // A new channel each time: new connections get the new certificate.
    cert_ok = List(Creds({t.server.cert, t.server.key, t.ca.cert}), t.viewer_token, &cn).ok() &&
              cn == "mlcd-renewed";
  }
  EXPECT_TRUE(token_ok) << server_.Log();
  EXPECT_TRUE(cert_ok) << "peer CN '" << cn << "'\n" << server_.Log();

  // A broken tokens file on SIGHUP keeps the last good tokens.
  ASSERT_TRUE(WriteFileAtomically(tokens, "not a token line\n").ok());
  server_.Signal(SIGHUP);
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_TRUE(List(creds, fresh).ok()) << server_.Log();
  EXPECT_NE(server_.Log().find("keeping the previous tokens"), std::string::npos) << server_.Log();
  // Removing the token and SIGHUP: refused again.
  ASSERT_TRUE(WriteFileAtomically(tokens, base_tokens).ok());
  server_.Signal(SIGHUP);
  bool refused = false;
  for (int i = 0; i < 50 && !refused; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    refused = List(creds, fresh).error_code() == grpc::StatusCode::UNAUTHENTICATED;
  }
  EXPECT_TRUE(refused);
  // Tokens never reach the log.
  EXPECT_EQ(server_.Log().find(fresh), std::string::npos);
  EXPECT_EQ(server_.Log().find(t.viewer_token), std::string::npos);
}

TEST(TokensFileTest, BadLinesAreRefusedWithTheLineAndNoToken) {
  const std::string token = "0123456789abcdef0123";
  auto ok = TokenTable::Parse("# c\n\n" + token + " viewer carol expires=4000000000\n", "f");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_NE(ok->Lookup(token), nullptr);
  EXPECT_EQ(ok->Lookup(token)->name, "carol");
  EXPECT_EQ(ok->Lookup(token + "x"), nullptr);
  for (const std::string& bad : std::vector<std::string>{
           token + " boss carol\n", "short viewer carol\n", token + " viewer\n",
           token + " viewer carol soon\n", token + " viewer a\n" + token + " admin b\n",
           token + " viewer a\nffffffffffffffffffff viewer a\n"}) {
    auto t = TokenTable::Parse(bad, "f");
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("line"), std::string::npos) << t.status().message();
    EXPECT_EQ(t.status().message().find(token), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace mlcd::testing
