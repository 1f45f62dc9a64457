#include "tests/testing/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/file_util.h"
#include "common/grpc_server.h"
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
    int status;
    ::waitpid(pid_, &status, 0);
  }
}

Status ChildProcess::Start(const std::string& binary, const std::vector<std::string>& args,
                           const std::string& log_path, const std::vector<std::string>& env) {
  if (::access(binary.c_str(), X_OK) != 0)
    return Status::NotFound(binary + ": not an executable (built?)");
  log_path_ = log_path;
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(127);
    // Undo any signal mask inherited from a test that blocks SIGTERM/SIGINT.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "execv %s: %s\n", binary.c_str(), std::strerror(errno));
    _exit(127);
  }
  pid_ = pid;
  return Status::Ok();
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int status;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
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
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return status;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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
