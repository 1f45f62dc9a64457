// The Python client's transport rule (python/src/mlcd/channel.py; docs/security.md,
// "Transport") against a real mlcd-labelstore serving plaintext on loopback with a tokens
// file, run with Debian's Python and python3-grpcio (no virtual environment):
//   * python/src/mlcd is copied into a temp folder and its mlcd.v1 stubs are generated there
//     from proto/ by protoc and grpc_python_plugin (MLCD_PROTOC, MLCD_GRPC_PYTHON_PLUGIN);
//   * plaintext_check.py makes clients with the viewer token and checks what is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/net.h"
#include "tests/testing/process.h"
#include "tests/testing/security.h"

namespace mlcd::testing {
namespace {

using std::chrono::seconds;

constexpr char kPython[] = "/usr/bin/python3";

std::string Source(const std::string& rel) { return std::string(MLCD_SOURCE_DIR) + "/" + rel; }

// The package with its generated stubs under `site`; "" or what failed.
std::string BuildPackage(const std::string& site) {
  std::string out;
  if (!MakeDirs(site).ok() ||
      RunCommand("/bin/cp", {"-r", Source("python/src/mlcd"), site}, &out) != 0) {
    return "copying python/src/mlcd failed: " + out;
  }
  std::vector<std::string> args = {
      "--proto_path=" + Source("proto"), "--python_out=" + site, "--grpc_python_out=" + site,
      std::string("--plugin=protoc-gen-grpc_python=") + MLCD_GRPC_PYTHON_PLUGIN};
  for (const auto& entry : std::filesystem::directory_iterator(Source("proto/mlcd/v1"))) {
    if (entry.path().extension() == ".proto") args.push_back(entry.path().string());
  }
  if (RunCommand(MLCD_PROTOC, args, &out) != 0) return "protoc failed: " + out;
  if (!WriteFileAtomically(site + "/mlcd/v1/__init__.py", "").ok())
    return "cannot write mlcd/v1/__init__.py";
  return "";
}

TEST(PyClientPlaintextTest, TokenGoesInPlaintextOnlyToLoopbackWithInsecure) {
  TempDir dir;
  const std::string site = dir.Sub("site");
  const std::string error = BuildPackage(site);
  ASSERT_TRUE(error.empty()) << error;

  const std::string address = "127.0.0.1:" + std::to_string(PickFreePort());
  const std::vector<std::string> no_tls = {
      "MLCD_TLS_CERT=", "MLCD_TLS_KEY=", "MLCD_TLS_CA=", "MLCD_INSECURE_TOKEN="};
  std::vector<std::string> env = no_tls;
  env.push_back("MLCD_TOKENS_FILE=" + TestCerts().tokens_file);
  env.push_back("MLCD_TOKEN_FILE=");
  ChildProcess store;
  Status started = StartLabelstore(&store, address, dir, env);
  ASSERT_TRUE(started.ok()) << started.ToString() << "\n" << store.Log();

  env = no_tls;
  for (const std::string& e : std::vector<std::string>{
           "PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1", "MLCD_LABELSTORE=" + address,
           "MLCD_COORDINATOR=", "MLCD_TOKEN_FILE=" + TestCerts().viewer_token_file}) {
    env.push_back(e);
  }
  std::string out;
  const int rc =
      RunCommand(kPython, {Source("tests/pyclient/plaintext_check.py")}, &out, env, seconds(120));
  EXPECT_EQ(rc, 0) << out << "\n" << store.Log();
  EXPECT_NE(out.find("plaintext: all checks passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace mlcd::testing
