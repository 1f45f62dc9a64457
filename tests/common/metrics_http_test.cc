// The built-in /metrics server (common/metrics_http.h) over real loopback TCP. It
// served one connection at a time, so a client that connected and sent nothing (or sent its
// request a byte at a time) held up every scrape. Now a silent client does not delay a GET,
// and is closed at its deadline; an oversized request is answered 431 and closed; a source
// at its cap has its newest connection refused, closing no one else's.
#include "common/metrics_http.h"
#include "common/metrics_http_request.h"
#include "tests/testing/http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace mlcd {
namespace {

using mlcd::testing::ConnectTcp;

using Clock = std::chrono::steady_clock;

// False when the server closed first (e.g. after answering 431, or at the deadline).
bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Everything the server sends until it closes, or until `limit` passes (then *closed = false).
std::string ReadUntilClosed(int fd, std::chrono::milliseconds limit, bool* closed) {
  std::string out;
  const auto deadline = Clock::now() + limit;
  *closed = false;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left))) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class MetricsHttpTest : public ::testing::Test {
 protected:
  void Start(MetricsHttpOptions options) {
    auto registry = std::make_shared<prometheus::Registry>();
    prometheus::BuildCounter()
        .Name("mlcd_test_scrapes_total")
        .Help("a series to find")
        .Register(*registry)
        .Add({})
        .Increment(7);
    server_ = std::make_unique<PlainMetricsHttpServer>(
        std::vector<std::shared_ptr<prometheus::Collectable>>{registry}, options);
    Status s = server_->Start("127.0.0.1:0");
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_GT(server_->port(), 0);
  }
  // Start() with these caps and a 30 s deadline (no connection here times out).
  void StartWithCaps(size_t max_connections, size_t per_source) {
    MetricsHttpOptions options;
    options.max_connections = max_connections;
    options.max_connections_per_source = per_source;
    options.request_timeout = std::chrono::seconds(30);
    Start(options);
  }
  // `n` connections from `source` that send nothing, once the server has taken them.
  std::vector<int> IdleFrom(int n, const std::string& source) {
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) fds.push_back(ConnectTcp(server_->port(), "127.0.0.1", source));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return fds;
  }
  // A GET /metrics on a new connection; its answer and how long it took.
  std::string Scrape(std::chrono::milliseconds* took) {
    const auto start = Clock::now();
    int fd = ConnectTcp(server_->port());
    EXPECT_GE(fd, 0);
    SendAll(fd, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    bool closed = false;
    std::string answer = ReadUntilClosed(fd, std::chrono::seconds(20), &closed);
    ::close(fd);
    EXPECT_TRUE(closed);
    *took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return answer;
  }

  std::unique_ptr<PlainMetricsHttpServer> server_;
};

TEST_F(MetricsHttpTest, ASilentClientDelaysNoScrapeAndIsClosedAtItsDeadline) {
  MetricsHttpOptions options;
  options.request_timeout = std::chrono::milliseconds(1500);
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const auto opened = Clock::now();
  int silent = ConnectTcp(server_->port());
  ASSERT_GE(silent, 0);
  // A slowloris: one byte of a request every 100 ms, never finishing it.
  int trickle = ConnectTcp(server_->port());
  ASSERT_GE(trickle, 0);
  std::thread trickler([&] {
    const std::string partial = "GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (char ch : partial) {
      if (!SendAll(trickle, std::string(1, ch))) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  // Scrapes are answered at once while both are connected (the old server waited on them).
  for (int i = 0; i < 3; ++i) {
    std::chrono::milliseconds took{};
    std::string answer = Scrape(&took);
    EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
    EXPECT_NE(answer.find("mlcd_test_scrapes_total 7"), std::string::npos) << answer;
    EXPECT_LT(took, std::chrono::milliseconds(500)) << "scrape " << i << " waited on a slow client";
  }

  // Both are closed at their deadline (1.5 s after accept), with nothing sent to them.
  for (int fd : {silent, trickle}) {
    bool closed = false;
    std::string got = ReadUntilClosed(fd, std::chrono::seconds(10), &closed);
    const auto after = Clock::now() - opened;
    EXPECT_TRUE(closed);
    EXPECT_TRUE(got.empty()) << got;
    EXPECT_GE(after, std::chrono::milliseconds(1400));
    EXPECT_LT(after, std::chrono::milliseconds(4000));
  }
  trickler.join();
  ::close(silent);
  ::close(trickle);
}

TEST_F(MetricsHttpTest, AnOversizedRequestIsAnswered431AndClosed) {
  ASSERT_NO_FATAL_FAILURE(Start(MetricsHttpOptions()));
  int fd = ConnectTcp(server_->port());
  ASSERT_GE(fd, 0);
  SendAll(fd, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(kMaxMetricsHttpRequestBytes, 'a'));
  bool closed = false;
  const auto start = Clock::now();
  // The server half-closes after its answer; the client closing its side ends the exchange.
  std::string answer = ReadUntilClosed(fd, std::chrono::seconds(3), &closed);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(closed);
  EXPECT_EQ(answer.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0), 0u) << answer;
  EXPECT_NE(answer.find("request header over 8192 bytes"), std::string::npos) << answer;
  ::close(fd);

  // A request just under the bound is served; other paths and methods get their codes.
  std::chrono::milliseconds took{};
  EXPECT_EQ(Scrape(&took).rfind("HTTP/1.1 200 OK", 0), 0u);
  for (auto [request, code] :
       {std::pair<std::string, std::string>{"GET /x HTTP/1.1\r\n\r\n", "404"},
        {"POST /metrics HTTP/1.1\r\n\r\n", "405"}}) {
    int c = ConnectTcp(server_->port());
    SendAll(c, request);
    std::string got = ReadUntilClosed(c, std::chrono::seconds(5), &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 " + code, 0), 0u) << request << got;
    ::close(c);
  }
}

// A GET /metrics from `source` on a new connection: the answer, "" when the server closed it
// unanswered.
std::string ScrapeFrom(int port, const std::string& source) {
  const int fd = ConnectTcp(port, "127.0.0.1", source);
  EXPECT_GE(fd, 0) << source;
  SendAll(fd, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  bool closed = false;
  std::string answer = ReadUntilClosed(fd, std::chrono::seconds(5), &closed);
  EXPECT_TRUE(closed) << source;
  ::close(fd);
  return answer;
}

// Whether the server closed `fd` within `limit`.
bool ClosedWithin(int fd, std::chrono::milliseconds limit) {
  bool closed = false;
  ReadUntilClosed(fd, limit, &closed);
  return closed;
}

// One source at its cap: its newest connection is refused, its open ones stay, and another
// source is served. Before, every new connection over the cap closed the oldest, so a client
// connecting fast enough closed every scrape before it was answered.
TEST_F(MetricsHttpTest, ASourceAtItsCapHasItsNewestRefusedAndNoOneElseClosed) {
  ASSERT_NO_FATAL_FAILURE(StartWithCaps(6, 3));
  // A slow scrape from 127.0.0.1: connected, its request not sent yet.
  const int slow = ConnectTcp(server_->port(), "127.0.0.1", "127.0.0.1");
  ASSERT_GE(slow, 0);
  const std::vector<int> flood = IdleFrom(3, "127.0.0.2");
  // 127.0.0.2 goes on connecting: each new one is closed unanswered, nothing else is.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ScrapeFrom(server_->port(), "127.0.0.2"), "") << i;
  for (int fd : flood) EXPECT_FALSE(ClosedWithin(fd, std::chrono::milliseconds(50)));
  ASSERT_TRUE(SendAll(slow, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  bool closed = false;
  const std::string answer = ReadUntilClosed(slow, std::chrono::seconds(5), &closed);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK", 0), 0u) << answer;
  EXPECT_NE(answer.find("mlcd_test_scrapes_total 7"), std::string::npos) << answer;
  ::close(slow);
  EXPECT_EQ(ScrapeFrom(server_->port(), "127.0.0.3").rfind("HTTP/1.1 200 OK", 0), 0u);
  for (int fd : flood) ::close(fd);
}

// At the server's cap a source holding two or more connections than the newcomer's gives up
// its oldest; between sources holding alike the newest is refused.
TEST_F(MetricsHttpTest, AtTheServersCapTheHeaviestSourceGivesWay) {
  ASSERT_NO_FATAL_FAILURE(StartWithCaps(4, 4));
  const std::vector<int> idle = IdleFrom(4, "127.0.0.2");
  // 127.0.0.3 holds none, 127.0.0.2 all four: 127.0.0.2's oldest makes room.
  EXPECT_EQ(ScrapeFrom(server_->port(), "127.0.0.3").rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_TRUE(ClosedWithin(idle[0], std::chrono::seconds(2)));
  EXPECT_FALSE(ClosedWithin(idle[3], std::chrono::milliseconds(200)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the scrape's close is seen
  // 127.0.0.4's second connection, at the cap again, takes 127.0.0.2's oldest (three against
  // one): then both hold two, and 127.0.0.4's third is refused.
  const int other1 = ConnectTcp(server_->port(), "127.0.0.1", "127.0.0.4");
  const int other2 = ConnectTcp(server_->port(), "127.0.0.1", "127.0.0.4");
  EXPECT_TRUE(ClosedWithin(idle[1], std::chrono::seconds(2)));
  EXPECT_EQ(ScrapeFrom(server_->port(), "127.0.0.4"), "");
  for (int fd : {idle[2], idle[3], other1, other2})
    EXPECT_FALSE(ClosedWithin(fd, std::chrono::milliseconds(50)));
  for (int fd : idle) ::close(fd);
  for (int fd : {other1, other2}) ::close(fd);
}

// The verdict of `request` fed at once, and checked to be the same fed a byte at a time.
MetricsHttpVerdict Verdict(const std::string& request, bool* head = nullptr,
                           size_t max = kMaxMetricsHttpRequestBytes) {
  MetricsRequestParser whole(max), bytewise(max);
  whole.Feed(request);
  for (char c : request) bytewise.Feed(std::string_view(&c, 1));
  EXPECT_EQ(whole.verdict(), bytewise.verdict()) << request;
  if (head) *head = whole.head();
  return whole.verdict();
}

TEST(MetricsRequestParserTest, AnswersByRequestLine) {
  using V = MetricsHttpVerdict;
  bool head = false;
  EXPECT_EQ(Verdict("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", &head), V::kMetrics);
  EXPECT_FALSE(head);
  EXPECT_EQ(Verdict("HEAD /metrics?name[]=x HTTP/1.0\r\n\r\n", &head), V::kMetrics);
  EXPECT_TRUE(head);
  EXPECT_EQ(Verdict("GET /metrics HTTP/1.1\nHost: a\n\n"), V::kMetrics);  // bare LF
  EXPECT_EQ(Verdict("GET /x HTTP/1.1\r\n\r\n"), V::kNotFound);
  EXPECT_EQ(Verdict("GET /metrics/ HTTP/1.1\r\n\r\n"), V::kNotFound);
  EXPECT_EQ(Verdict("GET /metricsx HTTP/1.1\r\n\r\n"), V::kNotFound);
  EXPECT_EQ(Verdict("POST /metrics HTTP/1.1\r\n\r\n"), V::kBadMethod);
  EXPECT_EQ(Verdict("BREW /metrics HTTP/1.1\r\n\r\n"), V::kBadMethod);
  for (const char* bad : {"GET  /metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2\r\n\r\n",
                          "GET metrics HTTP/1.1\r\n\r\n", "GET /me\x1btrics HTTP/1.1\r\n\r\n",
                          "G(T /metrics HTTP/1.1\r\n\r\n", "GET /metrics\r\n\r\n", "\r\n\r\n",
                          "GET /metrics HTTP/1.1 x\r\n\r\n", "GET /metrics HTTP/1.1\r\r\n\r\n"}) {
    EXPECT_EQ(Verdict(bad), V::kMalformed) << bad;
  }
  // Nothing is decided before the empty line (or the size bound).
  EXPECT_EQ(Verdict("GET /metrics HTTP/1.1\r\nHost: a\r\n"), V::kIncomplete);
  EXPECT_EQ(Verdict("GET /x HTTP/1.1\r\n\r"), V::kIncomplete);
  EXPECT_EQ(Verdict("GET /metrics HTTP/1.1\r\nX: " + std::string(50, 'a'), nullptr, 64),
            V::kTooLarge);
  const std::string exact = "GET /metrics HTTP/1.1\r\nX: aaaaaaa\r\n\r\n";
  EXPECT_EQ(Verdict(exact, nullptr, exact.size()), V::kMetrics);
  EXPECT_EQ(Verdict(exact, nullptr, exact.size() - 1), V::kTooLarge);
  // Final verdicts stay: what follows the head does not change them.
  MetricsRequestParser p;
  EXPECT_EQ(p.Feed("GET /x HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"), V::kNotFound);
  EXPECT_EQ(p.Feed(std::string(20000, 'a')), V::kNotFound);
}

TEST(MetricsRequestParserTest, AnswersAreWellFormed) {
  const std::string ok = MetricsHttpAnswer(MetricsHttpVerdict::kMetrics, false, "m 1\n");
  EXPECT_EQ(ok,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: 4\r\nConnection: close\r\n\r\nm 1\n");
  const std::string head = MetricsHttpAnswer(MetricsHttpVerdict::kMetrics, true, "m 1\n");
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
  EXPECT_NE(head.find("Content-Length: 4\r\n"), std::string::npos);
  EXPECT_EQ(MetricsHttpAnswer(MetricsHttpVerdict::kMalformed, false, "")
                .rfind("HTTP/1.1 400 Bad Request\r\n", 0),
            0u);
}

// Adopt(): a socketpair's end served as if accepted (the fuzz target drives the server so).
TEST_F(MetricsHttpTest, AnAdoptedSocketIsServedLikeAnAcceptedOne) {
  ASSERT_NO_FATAL_FAILURE(Start(MetricsHttpOptions()));
  for (const auto& [request, status] :
       {std::pair<std::string, std::string>{"GET /metrics HTTP/1.1\r\n\r\n", "200 OK"},
        {"GET /x HTTP/1.1\r\n\r\n", "404 Not Found"},
        {"GET  /x HTTP/1.1\r\n\r\n", "400 Bad Request"}}) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    server_->Adopt(sv[1]);
    ASSERT_TRUE(SendAll(sv[0], request));
    bool closed = false;
    const std::string answer = ReadUntilClosed(sv[0], std::chrono::seconds(5), &closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(answer.rfind("HTTP/1.1 " + status + "\r\n", 0), 0u) << answer;
    if (status == "200 OK") {
      EXPECT_NE(answer.find("mlcd_test_scrapes_total 7"), std::string::npos);
    }
    ::close(sv[0]);
  }
}

}  // namespace
}  // namespace mlcd
