// The fork/exec/wait facility (common/subprocess.h).
#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <string>

#include "common/file_util.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using std::chrono::milliseconds;

// Runs `options` to completion; the wait status.
int RunToExit(const SpawnOptions& options) {
  auto pid = Spawn(options);
  EXPECT_TRUE(pid.ok()) << pid.status().ToString();
  return pid.ok() ? WaitForExit(*pid) : -1;
}

int ExitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

std::string ReadLog(const std::string& path) {
  auto text = ReadFileToString(path);
  return text.ok() ? *text : "";
}

SpawnOptions Shell(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

TEST(Subprocess, ExitCodes) {
  SpawnOptions t;
  t.argv = {"/bin/true"};
  EXPECT_EQ(ExitCode(RunToExit(t)), 0);
  SpawnOptions f;
  f.argv = {"/bin/false"};
  EXPECT_EQ(ExitCode(RunToExit(f)), 1);
  SpawnOptions path;
  path.argv = {"true"};
  path.search_path = true;
  EXPECT_EQ(ExitCode(RunToExit(path)), 0);
}

TEST(Subprocess, EmptyArgvIsAnError) {
  EXPECT_EQ(Spawn(SpawnOptions()).status().code(), StatusCode::kInvalidArgument);
}

TEST(Subprocess, ExecFailureExits127WithAMessage) {
  testing::TempDir dir;
  SpawnOptions o;
  o.argv = {dir.Sub("no-such-program"), "x"};
  o.log_path = dir.Sub("log");
  EXPECT_EQ(ExitCode(RunToExit(o)), kExecFailedExitCode);
  EXPECT_EQ(ReadLog(o.log_path),
            "exec " + dir.Sub("no-such-program") + ": No such file or directory\n");
  o.exec_error_prefix = "cannot run it";
  EXPECT_EQ(ExitCode(RunToExit(o)), kExecFailedExitCode);
  EXPECT_NE(ReadLog(o.log_path).find("cannot run it: No such file or directory\n"),
            std::string::npos);
}

TEST(Subprocess, LogRedirection) {
  testing::TempDir dir;
  SpawnOptions o = Shell("echo out; echo err >&2");
  o.log_path = dir.Sub("both.log");
  EXPECT_EQ(ExitCode(RunToExit(o)), 0);
  EXPECT_EQ(ReadLog(o.log_path), "out\nerr\n");
  EXPECT_EQ(ExitCode(RunToExit(o)), 0);  // appended
  EXPECT_EQ(ReadLog(o.log_path), "out\nerr\nout\nerr\n");

  // stderr only; stdout to a pipe.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  o.log_path = dir.Sub("err.log");
  o.log_stdout = false;
  o.stdout_fd = fds[1];
  o.close_fds = {fds[0], fds[1]};
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok());
  ::close(fds[1]);
  std::string piped;
  char buf[64];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) piped.append(buf, n);
  ::close(fds[0]);
  EXPECT_EQ(ExitCode(WaitForExit(*pid)), 0);
  EXPECT_EQ(piped, "out\n");
  EXPECT_EQ(ReadLog(o.log_path), "err\n");
}

TEST(Subprocess, Environment) {
  testing::TempDir dir;
  ::setenv("MLCD_SUBPROCESS_TEST_KEEP", "kept", 1);
  ::setenv("MLCD_SUBPROCESS_TEST_DROP", "dropped", 1);
  ::setenv("MLCD_SUBPROCESS_TEST_SET", "old", 1);
  SpawnOptions o = Shell(
      "echo \"$MLCD_SUBPROCESS_TEST_KEEP ${MLCD_SUBPROCESS_TEST_DROP-unset} "
      "$MLCD_SUBPROCESS_TEST_SET $MLCD_SUBPROCESS_TEST_NEW\"");
  o.log_path = dir.Sub("inherit.log");
  EXPECT_EQ(ExitCode(RunToExit(o)), 0);
  EXPECT_EQ(ReadLog(o.log_path), "kept dropped old \n");

  o.log_path = dir.Sub("changed.log");
  o.unset_env = {"MLCD_SUBPROCESS_TEST_DROP"};
  o.set_env = {"MLCD_SUBPROCESS_TEST_SET=first", "MLCD_SUBPROCESS_TEST_NEW=new",
               "MLCD_SUBPROCESS_TEST_SET=new"};
  EXPECT_EQ(ExitCode(RunToExit(o)), 0);
  EXPECT_EQ(ReadLog(o.log_path), "kept unset new new\n");
  // The parent's environment is untouched.
  EXPECT_STREQ(::getenv("MLCD_SUBPROCESS_TEST_DROP"), "dropped");
  EXPECT_STREQ(::getenv("MLCD_SUBPROCESS_TEST_SET"), "old");

  o.log_path = dir.Sub("full.log");
  o.env = std::vector<std::string>{"MLCD_SUBPROCESS_TEST_NEW=only"};
  EXPECT_EQ(ExitCode(RunToExit(o)), 0);
  EXPECT_EQ(ReadLog(o.log_path), " unset  only\n");
  ::unsetenv("MLCD_SUBPROCESS_TEST_KEEP");
  ::unsetenv("MLCD_SUBPROCESS_TEST_DROP");
  ::unsetenv("MLCD_SUBPROCESS_TEST_SET");
}

TEST(Subprocess, WorkingDirAndStdin) {
  testing::TempDir dir;
  SpawnOptions o = Shell("pwd; cat");
  o.working_dir = dir.path();
  o.stdin_from_dev_null = true;
  o.log_path = dir.Sub("log");
  EXPECT_EQ(ExitCode(RunToExit(o)), 0);
  char real[PATH_MAX];
  ASSERT_NE(::realpath(dir.path().c_str(), real), nullptr);
  EXPECT_EQ(ReadLog(o.log_path), std::string(real) + "\n");
}

TEST(Subprocess, ProcessGroupAndWaiting) {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  o.new_process_group = true;
  o.parent_death_signal = SIGKILL;
  o.clear_signal_mask = true;
  o.default_sigpipe = true;
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(::getpgid(*pid), *pid);
  EXPECT_FALSE(TryWait(*pid).has_value());
  EXPECT_FALSE(WaitForExitFor(*pid, milliseconds(50)).has_value());
  ::kill(-*pid, SIGTERM);
  auto status = WaitForExitFor(*pid, std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
  EXPECT_EQ(WaitForExit(*pid), -1);  // reaped already
}

}  // namespace
}  // namespace mlcd
