// Terminal escapes from data: text that users or data chose reaches
// other users' terminals through mlcdctl and the operators' through the services' logs. A
// job's message holding ESC, BEL and backspace (here from a cancel reason; in the issue from
// a tar member's name, which the dataset index now refuses) is printed escaped by `mlcdctl
// get`, `list` and `watch`, and written escaped to the coordinator's log.
#include <gtest/gtest.h>

#include <string>

#include "common/file_util.h"
#include "common/grpc_server.h"
#include "tests/coordinator/harness.h"

namespace mlcd::testing {
namespace {

// The reason a submitter gives: set the terminal's title, clear the screen, erase backwards.
const char kReason[] = "\x1b]0;pwned\x07\x1b[2J\b\bok";
// How it must appear: every control character visible.
const char kShown[] = "\\x1b]0;pwned\\x07\\x1b[2J\\x08\\x08ok";

// The first control character of `text` other than a newline, or -1.
int FirstControl(const std::string& text) {
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) return c;
  }
  return -1;
}

TEST(TerminalEscapesTest, AJobMessageWithControlCharactersIsPrintedAndLoggedEscaped) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_TRUE(cluster.StartServices().ok()) << cluster.Logs();
  TinyJob tiny;
  auto job = cluster.Submit(tiny.Yaml());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  v1::CancelJobRequest cancel;
  cancel.set_id(job->id());
  cancel.set_reason(kReason);
  v1::Job cancelled;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  ASSERT_TRUE(cluster.stub()->CancelJob(&context, cancel, &cancelled).ok());
  ASSERT_EQ(cancelled.message(), std::string("cancelled: ") + kReason);  // stored as given

  const std::string flag = "--coordinator=" + cluster.coordinator_address();
  for (const std::vector<std::string>& command : {std::vector<std::string>{flag, "get", job->id()},
                                                  {flag, "list"},
                                                  {flag, "watch", job->id()}}) {
    std::string out;
    RunCommand(BinPath("mlcdctl"), command, &out);
    EXPECT_EQ(FirstControl(out), -1) << "mlcdctl " << command[1] << " printed:\n" << out;
    EXPECT_NE(out.find(std::string("cancelled: ") + kShown), std::string::npos)
        << "mlcdctl " << command[1] << " printed:\n"
        << out;
  }
  // JSON output escapes them by itself (\u001b), and stays parseable.
  std::string json;
  RunCommand(BinPath("mlcdctl"), {flag, "--output", "json", "get", job->id()}, &json);
  EXPECT_EQ(FirstControl(json), -1) << json;
  EXPECT_NE(json.find("\\u001b]0;pwned\\u0007"), std::string::npos) << json;

  // The coordinator logged the transition with its message: one line, escaped.
  auto log = ReadFileToString(dir.Sub("logs/coordinator.log"));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(FirstControl(*log), -1) << *log;
  EXPECT_NE(log->find(kShown), std::string::npos) << *log;
}

}  // namespace
}  // namespace mlcd::testing
