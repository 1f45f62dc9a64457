#include "tests/testing/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/subprocess.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace mlcd::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/mlcd-test-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  char* made = mkdtemp(buf.data());
  if (!made) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = made;
}

TempDir::~TempDir() {
  if (std::getenv("MLCD_KEEP_TEST_DIRS")) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string BinPath(const std::string& name) {
#ifdef MLCD_BIN_DIR
  return std::string(MLCD_BIN_DIR) + "/" + name;
#else
  return name;
#endif
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    WaitForExit(pid_);
  }
}

Status ChildProcess::Start(const std::string& binary, const std::vector<std::string>& args,
                           const std::string& log_path, const std::vector<std::string>& env) {
  if (::access(binary.c_str(), X_OK) != 0)
    return Status::NotFound(binary + ": not an executable (built?)");
  log_path_ = log_path;
  SpawnOptions spawn;
  spawn.argv = {binary};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.set_env = env;
  spawn.log_path = log_path;
  spawn.parent_death_signal = SIGKILL;
  // Undo any signal mask inherited from a test that blocks SIGTERM/SIGINT.
  spawn.clear_signal_mask = true;
  spawn.exec_error_prefix = "execv " + binary;
  MLCD_ASSIGN_OR_RETURN(pid_, Spawn(spawn));
  return Status::Ok();
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  if (TryWait(pid_)) {
    pid_ = -1;
    return false;
  }
  return true;
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return 0;
  const std::optional<int> status = WaitForExitFor(pid_, timeout);
  if (!status) return -1;
  pid_ = -1;
  return *status;
}

int ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return 0;
  Signal(SIGTERM);
  int status = Wait(grace);
  if (status == -1) {
    Signal(SIGKILL);
    status = Wait(std::chrono::seconds(10));
  }
  return status;
}

std::string ChildProcess::Log() const {
  auto text = ReadFileToString(log_path_);
  return text.ok() ? *text : std::string("(no log: ") + text.status().ToString() + ")";
}

Status StartLabelstore(ChildProcess* process, const std::string& address, const TempDir& dir,
                       const std::vector<std::string>& env) {
  MLCD_RETURN_IF_ERROR(process->Start(
      BinPath("mlcd-labelstore"),
      {"--listen", address, "--metrics-listen", "", "--data-dir", dir.Sub("labelstore")},
      dir.Sub("labelstore.log"), env));
  return WaitForServing(address, std::chrono::seconds(30));
}

Status WaitForServing(const std::string& address, std::chrono::milliseconds timeout,
                      const std::string& service) {
  auto channel = MakeChannel(address);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::milliseconds(500)));
    // Without wait_for_ready a call on a channel in TRANSIENT_FAILURE fails at once and (gRPC
    // 1.51) the channel only retries the connection about every 5 s, so a server that comes up
    // just after the first attempt would be seen 5-10 s late.
    ctx.set_wait_for_ready(true);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status st = stub->Check(&ctx, req, &resp);
    if (st.ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING)
      return Status::Ok();
    last = st.ok() ? "status " + std::to_string(resp.status()) : st.error_message();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::Unavailable(address + " not SERVING within " + std::to_string(timeout.count()) +
                             " ms: " + last);
}

int RunCommand(const std::string& binary, const std::vector<std::string>& args, std::string* output,
               const std::vector<std::string>& env, std::chrono::milliseconds timeout) {
  TempDir dir;
  ChildProcess child;
  std::string log = dir.Sub("out.log");
  if (!child.Start(binary, args, log, env).ok()) return -1;
  int status = child.Wait(timeout);
  if (status == -1) {
    child.Signal(SIGKILL);
    child.Wait(std::chrono::seconds(5));
  }
  if (output) *output = child.Log();
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace mlcd::testing
