// The TLS material on disk: a service keeps its private copy of the key
// under its --data-dir, never in /tmp (the copies there outlived their processes: 37 after a
// day), removes it at a clean stop and replaces one a killed process left, keeps it 0600 and
// one generation deep; and it picks up renewed certificate files by itself, without a SIGHUP.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "common/cert_maker.h"
#include "common/file_util.h"
#include "common/net.h"
#include "common/tls_config.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/testing/process.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(EnableTestSecurity().ok());
    address_ = "127.0.0.1:" + std::to_string(PickFreePort());
  }

  // mlcd-labelstore with TMPDIR set to tmp_ (where the copies used to go) and `env`.
  Status Start(const std::vector<std::string>& env = {}) {
    std::vector<std::string> full_env = NoTokenEnv();
    full_env.push_back("TMPDIR=" + tmp_.path());
    full_env.insert(full_env.end(), env.begin(), env.end());
    MLCD_RETURN_IF_ERROR(server_.Start(BinPath("mlcd-labelstore"),
                                       {"--listen", address_, "--metrics-listen", "", "--data-dir",
                                        data_},
                                       dir_.Sub("labelstore-" + std::to_string(++starts_) + ".log"),
                                       full_env));
    return WaitForServing(address_, seconds(30));
  }

  std::vector<std::string> TmpEntries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(tmp_.path()))
      names.push_back(e.path().filename().string());
    return names;
  }

  // The peer certificate's CN seen by a new TLS connection ("" when the call failed).
  std::string PeerCommonName() {
    const TestSecurity& t = TestCerts();
    auto config = TlsConfig::Open({t.server.cert, t.server.key, t.ca.cert});
    if (!config.ok()) return "";
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    auto stub = v1::LabelStore::NewStub(
        grpc::CreateCustomChannel(address_, (*config)->ChannelCredentials(), args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(5));
    context.AddMetadata("authorization", "Bearer " + t.viewer_token);
    v1::ListLabelSetsResponse response;
    if (!stub->ListLabelSets(&context, v1::ListLabelSetsRequest(), &response).ok()) return "";
    auto cn = context.auth_context()->FindPropertyValues("x509_common_name");
    return cn.empty() ? "" : std::string(cn[0].data(), cn[0].size());
  }

  TempDir dir_, tmp_;
  std::string data_ = dir_.Sub("labelstore");
  std::string address_;
  ChildProcess server_;
  int starts_ = 0;
};

// Before: every process copied its key to a new /tmp/mlcd-tls-XXXXXX, and a killed one (or one
// that left by _exit) left it there for good.
TEST_F(TlsFilesTest, NoKeyCopyIsLeftInTmpAfterACleanStopOrAKill) {
  const std::string copy = data_ + "/tls-private";
  ASSERT_TRUE(Start().ok()) << server_.Log();
  ASSERT_TRUE(IsDirectory(copy)) << server_.Log();
  struct stat st {};
  ASSERT_EQ(::stat(copy.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(PathExists(copy + "/current/key.pem"));
  EXPECT_TRUE(TmpEntries().empty()) << TmpEntries()[0];
  // A clean stop removes the copy.
  server_.Signal(SIGTERM);
  const int status = server_.Wait(seconds(30));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << server_.Log();
  EXPECT_FALSE(PathExists(copy));
  EXPECT_TRUE(TmpEntries().empty());
  // kill -9 leaves it under the data dir only; the next start replaces it.
  ASSERT_TRUE(Start().ok()) << server_.Log();
  server_.Signal(SIGKILL);
  server_.Wait(seconds(30));
  EXPECT_TRUE(PathExists(copy + "/current/key.pem"));
  ASSERT_TRUE(WriteFileAtomically(copy + "/left-by-the-killed-one", std::string("x")).ok());
  EXPECT_TRUE(TmpEntries().empty());
  ASSERT_TRUE(Start().ok()) << server_.Log();
  EXPECT_FALSE(PathExists(copy + "/left-by-the-killed-one"));
  EXPECT_TRUE(PathExists(copy + "/current/key.pem"));
  server_.Signal(SIGTERM);
  server_.Wait(seconds(30));
  EXPECT_FALSE(PathExists(copy));
  EXPECT_TRUE(TmpEntries().empty());
}

// Before: a renewed certificate was served only after a SIGHUP. Now the files are watched.
TEST_F(TlsFilesTest, RenewedCertificateFilesAreServedWithoutASighup) {
  const TestSecurity& t = TestCerts();
  const std::string cert = dir_.Sub("cert.pem"), key = dir_.Sub("key.pem");
  ASSERT_TRUE(WriteFileAtomically(cert, *ReadFileToString(t.server.cert)).ok());
  ASSERT_TRUE(WriteFileAtomically(key, *ReadFileToString(t.server.key)).ok());
  ASSERT_TRUE(Start({"MLCD_TLS_CERT=" + cert, "MLCD_TLS_KEY=" + key}).ok()) << server_.Log();
  EXPECT_EQ(PeerCommonName(), "mlcd-test-service") << server_.Log();
  auto renewed = IssueCert(t.ca, dir_.Sub("renewed"), "renewed", "mlcd-renewed",
                           {"IP:127.0.0.1", "DNS:localhost"});
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  // As cert-manager or certbot do: each file replaced by rename, the key first.
  ASSERT_TRUE(WriteFileAtomically(key, *ReadFileToString(renewed->key)).ok());
  ASSERT_TRUE(WriteFileAtomically(cert, *ReadFileToString(renewed->cert)).ok());
  std::string cn;
  for (int i = 0; i < 100 && cn != "mlcd-renewed"; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    cn = PeerCommonName();
  }
  EXPECT_EQ(cn, "mlcd-renewed") << server_.Log();
  EXPECT_NE(server_.Log().find("TLS files changed on disk; reloading"), std::string::npos)
      << server_.Log();
}

// The generation folders of the private copy.
std::vector<std::string> Generations(const std::string& copy) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(copy, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("gen-", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Before: the copies were written 0644 (inside the 0700 folder) and the previous generation
// stayed until the next reload. Now every copy is 0600 from its creation, and once a reload's
// generation is served the one before it is removed.
TEST_F(TlsFilesTest, KeyCopiesAreTheUsersAloneAndOnlyTheServedGenerationStays) {
  const std::string copy = data_ + "/tls-private";
  ASSERT_TRUE(Start().ok()) << server_.Log();
  auto modes = [&] {
    std::vector<std::string> bad;
    for (const char* name : {"cert.pem", "key.pem", "ca.pem"}) {
      struct stat st {};
      const std::string path = copy + "/current/" + name;
      if (::stat(path.c_str(), &st) != 0 || (st.st_mode & 0777) != 0600)
        bad.push_back(path + " " + std::to_string(st.st_mode & 0777));
    }
    return bad;
  };
  EXPECT_TRUE(modes().empty()) << modes()[0];
  EXPECT_EQ(Generations(copy), std::vector<std::string>{"gen-1"});
  server_.Signal(SIGHUP);
  std::vector<std::string> gens;
  for (int i = 0; i < 100; ++i) {
    gens = Generations(copy);
    if (gens == std::vector<std::string>{"gen-2"}) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(gens, std::vector<std::string>{"gen-2"}) << server_.Log();
  EXPECT_TRUE(modes().empty()) << modes()[0];
  EXPECT_EQ(PeerCommonName(), "mlcd-test-service") << server_.Log();
}

}  // namespace
}  // namespace mlcd::testing
