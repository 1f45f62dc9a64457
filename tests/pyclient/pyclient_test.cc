// The Python client package (python/, docs/python-client.md) against a real local cluster.
//
// Set-up, once for the suite:
//   * python/ and proto/ are copied into a temp folder as a clone lays them out, and the
//     package is pip-installed from there, offline (--no-index --no-build-isolation), with the
//     interop venv's Python (MLCD_INTEROP_PYTHON: grpcio-tools and setuptools) into a target
//     folder; its stubs are generated from proto/ by that build;
//   * `mlcdctl local up --detach` starts the label store, clusterd, the coordinator and two
//     worker agents on free loopback ports with TLS and tokens, in the temp folder;
//   * a token of role viewer is added to the cluster's tokens file (common/tokens.h format)
//     and the coordinator and label store reload it (SIGHUP), as tests/security does.
// Each test runs one case of client_check.py with the cluster's env file (`<dir>/env`:
// MLCD_COORDINATOR, MLCD_LABELSTORE, MLCD_TLS_*, MLCD_TOKEN_FILE) and the installed package.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/cert_maker.h"
#include "common/file_util.h"
#include "tests/testing/process.h"

namespace mlcd::testing {
namespace {

constexpr auto kInstallTimeout = std::chrono::seconds(180);
constexpr auto kClusterTimeout = std::chrono::seconds(120);
constexpr auto kCaseTimeout = std::chrono::seconds(150);

struct Cluster {
  TempDir dir;
  std::string python;
  std::vector<std::string> env;  // the cluster's env file and the checks' variables
  bool up = false;
  std::string error;  // why the set-up failed (every test reports it)
};

std::string Source(const std::string& rel) { return std::string(MLCD_SOURCE_DIR) + "/" + rel; }

// "export NAME=value" lines of `mlcdctl local up`'s env file, as NAME=value entries.
std::vector<std::string> ReadEnvFile(const std::string& path, std::string* error) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    *error = "cannot read " + path + ": " + text.status().message();
    return {};
  }
  std::vector<std::string> env;
  std::istringstream in(*text);
  std::string line;
  const std::string prefix = "export ";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) env.push_back(line.substr(prefix.size()));
  }
  return env;
}

// Builds and installs the package into `site` from a clone-shaped copy; "" or what failed.
std::string InstallPackage(Cluster* c, const std::string& site) {
  const std::string src = c->dir.Sub("src");
  std::string out;
  if (!MakeDirs(src).ok() ||
      RunCommand("/bin/cp", {"-r", Source("python"), Source("proto"), src}, &out) != 0) {
    return "copying python/ and proto/ failed: " + out;
  }
  // A build folder left by an in-place `pip install ./python` must not leak into this one.
  RunCommand("/bin/rm", {"-rf", src + "/python/build", src + "/python/dist"}, &out);
  int rc = RunCommand(c->python,
                      {"-m", "pip", "install", "--disable-pip-version-check", "--no-index",
                       "--no-build-isolation", "--no-deps", "--target", site, src + "/python"},
                      &out, {"PIP_NO_INPUT=1", "PYTHONDONTWRITEBYTECODE=1"}, kInstallTimeout);
  return rc == 0 ? "" : "pip install ./python failed (" + std::to_string(rc) + "):\n" + out;
}

// Adds a viewer token to the cluster's tokens file and makes the services reload it.
std::string AddViewerToken(Cluster* c, const std::string& local, const std::string& token_file) {
  auto token = NewRandomToken();
  auto tokens = ReadFileToString(local + "/tls/tokens");
  auto info = ReadFileToString(local + "/cluster.json");
  if (!token.ok() || !tokens.ok() || !info.ok()) return "no tokens file or cluster.json in " + local;
  if (!WriteFileAtomically(token_file, *token + "\n").ok() ||
      !WriteFileAtomically(local + "/tls/tokens", *tokens + *token + " viewer pyclient-viewer\n")
           .ok()) {
    return "cannot write the viewer token";
  }
  const auto doc = nlohmann::json::parse(*info, nullptr, /*allow_exceptions=*/false);
  for (const char* service : {"coordinator", "labelstore"}) {
    const bool known = doc.is_object() && doc.contains("pids") && doc["pids"].is_object() &&
                       doc["pids"].contains(service) && doc["pids"][service].is_number_integer();
    if (!known || ::kill(doc["pids"][service].get<pid_t>(), SIGHUP) != 0)
      return std::string("cannot SIGHUP the ") + service + " (cluster.json: " + *info + ")";
  }
  return "";
}

std::string StartCluster(Cluster* c) {
  const char* python = std::getenv("MLCD_INTEROP_PYTHON");
  c->python = python ? python : "";
  if (c->python.empty() || ::access(c->python.c_str(), X_OK) != 0) {
    return "MLCD_INTEROP_PYTHON ('" + c->python +
           "') is not an executable: the interop tests run with the pip flavour's venv "
           "(scripts/run_interop_tests.sh makes it; -DMLCD_INTEROP_PYTHON=... points at another)";
  }
  const std::string site = c->dir.Sub("site"), local = c->dir.Sub("local");
  std::string error = InstallPackage(c, site);
  if (!error.empty()) return error;
  std::string out;
  int rc = RunCommand(BinPath("mlcdctl"),
                      {"local", "up", "--workers", "2", "--dir", local, "--ports", "auto",
                       "--detach", "--bin-dir", MLCD_BIN_DIR},
                      &out, {}, kClusterTimeout);
  c->up = true;  // whatever started is stopped at the end
  if (rc != 0) return "mlcdctl local up failed (" + std::to_string(rc) + "):\n" + out;
  c->env = ReadEnvFile(local + "/env", &error);
  if (!error.empty()) return error;
  const std::string viewer = c->dir.Sub("viewer.token");
  error = AddViewerToken(c, local, viewer);
  for (const std::string& e : std::vector<std::string>{
           "PYTHONPATH=" + site, "MLCD_PACKAGE_DIR=" + site, "MLCD_SOURCE_DIR=" MLCD_SOURCE_DIR,
        "MLCD_BIN_DIR=" MLCD_BIN_DIR, "MLCD_TEST_DIR=" + c->dir.path(),
        "MLCD_VIEWER_TOKEN_FILE=" + viewer, "PYTHONDONTWRITEBYTECODE=1"}) {
    c->env.push_back(e);
  }
  return error;
}

class PyClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster();
    cluster_->error = StartCluster(cluster_);
  }

  static void TearDownTestSuite() {
    if (cluster_->up) {
      std::string out;
      if (RunCommand(BinPath("mlcdctl"), {"local", "down", "--dir", cluster_->dir.Sub("local")},
                     &out, {}, kClusterTimeout) != 0) {
        ADD_FAILURE() << "mlcdctl local down failed:\n" << out;
      }
    }
    delete cluster_;
    cluster_ = nullptr;
  }

  // Runs client_check.py CASE; fails the test with its output unless it passes.
  static void RunCase(const std::string& name) {
    ASSERT_TRUE(cluster_->error.empty()) << cluster_->error;
    std::string out;
    int rc = RunCommand(cluster_->python, {Source("tests/pyclient/client_check.py"), name}, &out,
                        cluster_->env, kCaseTimeout);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find(name + ": all checks passed"), std::string::npos) << out;
  }

  static Cluster* cluster_;
};

Cluster* PyClientTest::cluster_ = nullptr;

// Settings as mlcdctl reads them; bad token and TLS files refused before any call; the
// imported package is the pip-installed one, with the stubs its build generated.
TEST_F(PyClientTest, Settings) { RunCase("settings"); }

// Submit a YAML file twice with one request id: one job; as a dict: the same job; another
// spec under that id: ALREADY_EXISTS. Watch to SUCCEEDED; get, list; the job's label set
// described and read, rows equal to `mlcdctl labels get`.
TEST_F(PyClientTest, SubmitIdempotentWatchToSucceeded) { RunCase("jobs"); }

// The Airflow-style example task, twice for one task instance: one job, SUCCEEDED.
TEST_F(PyClientTest, AirflowExample) { RunCase("airflow"); }

// Cancel ends the job CANCELLED; wait(check=True) raises JobNotSucceededError.
TEST_F(PyClientTest, Cancel) { RunCase("cancel"); }

// Bad YAML, dict and JobSpec specs raise InvalidArgumentError with their field paths.
TEST_F(PyClientTest, BadSpecRaisesWithFieldPath) { RunCase("bad_spec"); }

// A viewer token lists and reads but gets PERMISSION_DENIED on submit and cancel; no token
// is UNAUTHENTICATED; the token in plaintext is refused without insecure=True; plaintext to
// the TLS coordinator is UNAVAILABLE naming the address.
TEST_F(PyClientTest, ViewerCannotSubmit) { RunCase("viewer"); }

}  // namespace
}  // namespace mlcd::testing
