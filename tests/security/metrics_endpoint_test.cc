// The /metrics endpoint of the real coordinator, label store and clusterd (TLS and tokens on
// for their gRPC, as the TestCluster harness runs them; /metrics is plain HTTP, unauthenticated
// by design). Each case was once a failure:
//   1. one GET of a path other than /metrics ended clusterd with SIGSEGV (civetweb's 100 KiB
//      thread stack overflowed beside OpenBLAS's 60 KiB of static TLS while it wrote the 404);
//   2. civetweb served one connection at a time, so idle or trickling clients (slowloris) made
//      every scrape time out;
//   3. a new connection over the cap closed the oldest, so a client connecting fast enough
//      closed slow scrapes before they were answered.
// Now every process serves /metrics with common/metrics_http.h.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "common/net.h"
#include "tests/coordinator/harness.h"
#include "tests/testing/http.h"

namespace mlcd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Idle and trickling connections opened against each service.
constexpr int kSlowClients = 200;

struct Service {
  std::string name;  // as in the metric names: mlcd_<name>_...
  std::string metrics;
  std::string grpc;
};

int PortOf(const std::string& address) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(SplitHostPort(address, "address", &host, &port).ok()) << address;
  return port;
}

// Connects, sends `request` `send_after` later and reads until the server closes or `limit`
// passes from the connect; *took is the time to the close (or the limit).
std::string Exchange(int port, const std::string& request, milliseconds limit, milliseconds* took,
                     milliseconds send_after = milliseconds(0)) {
  const auto start = Clock::now();
  std::string out;
  const int fd = ConnectTcp(port);
  if (fd < 0) return "(cannot connect)";
  std::this_thread::sleep_for(send_after);
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) out = "(send failed)";
  while (Clock::now() - start < limit) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  *took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  return out;
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartServices().ok()) << cluster_.Logs();
    services_ = {{"coordinator", cluster_.coordinator_metrics(), cluster_.coordinator_address()},
                 {"labelstore", cluster_.labelstore_metrics(), cluster_.labelstore_address()},
                 {"clusterd", cluster_.clusterd_metrics(), cluster_.clusterd_address()}};
  }

  // A scrape answers 200 with the service's own series within 1 s; the service's gRPC
  // health says SERVING.
  void ExpectUp(const Service& s, const std::string& when) {
    milliseconds took{};
    const std::string answer = Exchange(
        PortOf(s.metrics), "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", milliseconds(5000), &took);
    EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u)
        << s.name << " " << when << ": " << answer;
    EXPECT_NE(answer.find("mlcd_" + s.name + "_"), std::string::npos) << s.name << " " << when;
    EXPECT_LT(took, milliseconds(1000)) << s.name << " " << when << ": the scrape took too long";
    EXPECT_TRUE(WaitForServing(s.grpc, std::chrono::seconds(5)).ok())
        << s.name << " " << when << " is down:\n"
        << cluster_.Logs();
  }

  TempDir dir_;
  TestCluster cluster_{dir_};
  std::vector<Service> services_;
};

TEST_F(MetricsEndpointTest, OtherPathsAndMethodsGetTheirCodesAndTheServiceStaysUp) {
  for (const Service& s : services_) {
    for (const auto& [request, status] : std::vector<std::pair<std::string, std::string>>{
             {"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", "404 Not Found"},
             {"GET /metrics/../x?y HTTP/1.0\r\n\r\n", "404 Not Found"},
             {"HEAD /nope HTTP/1.1\r\n\r\n", "404 Not Found"},
             {"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "405 Method Not Allowed"},
             {"\x16\x03\x01\x02\x05\x01\x05\x01\xfc\x03\x03\r\n\r\n", "400 Bad Request"},  // TLS
             {"GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n",
              "431 Request Header Fields Too Large"}}) {
      milliseconds took{};
      const std::string answer = Exchange(PortOf(s.metrics), request, milliseconds(5000), &took);
      EXPECT_EQ(answer.rfind("HTTP/1.1 " + status + "\r\n", 0), 0u)
          << s.name << " answered " << answer.substr(0, 200) << " to " << request.substr(0, 40);
    }
    ExpectUp(s, "after the requests");
  }
  // Still alive a moment later (clusterd used to die on the 404).
  std::this_thread::sleep_for(milliseconds(300));
  for (const Service& s : services_) ExpectUp(s, "300 ms later");
}

TEST_F(MetricsEndpointTest, AScrapeAnswersWithinOneSecondBeside200SlowClients) {
  for (const Service& s : services_) {
    const int port = PortOf(s.metrics);
    // Half connect and send nothing; half trickle a header that never ends, one byte per
    // connection every 100 ms (slowloris). From 25 addresses other than the scrapes', 8 each.
    std::vector<int> fds;
    for (int i = 0; i < kSlowClients; ++i) {
      const int fd = ConnectTcp(port, "127.0.0.1", "127.0.1." + std::to_string(1 + i % 25));
      ASSERT_GE(fd, 0) << s.name << " refused connection " << i;
      fds.push_back(fd);
    }
    std::atomic<bool> stop{false};
    std::thread trickler([&] {
      const std::string head = "GET /metrics HTTP/1.1\r\nX-Slow: ";
      for (size_t k = 0; !stop; ++k) {
        const char c = k < head.size() ? head[k] : 'a';
        for (size_t i = 1; i < fds.size(); i += 2) (void)::send(fds[i], &c, 1, MSG_NOSIGNAL);
        std::this_thread::sleep_for(milliseconds(100));
      }
    });
    std::this_thread::sleep_for(milliseconds(300));
    for (int round = 0; round < 5; ++round) ExpectUp(s, "scrape " + std::to_string(round));
    stop = true;
    trickler.join();
    for (int fd : fds) ::close(fd);
  }
}

// Before: a new connection over the cap closed the oldest, so a client connecting ~200 times a
// second closed scrapes that took their time to send the request before they were answered.
// Now its newest connections are refused and the scrapes, from another address, are answered.
TEST_F(MetricsEndpointTest, SlowScrapesAreAnsweredBesideAClientConnecting200TimesASecond) {
  for (const Service& s : services_) {
    const int port = PortOf(s.metrics);
    std::atomic<bool> stop{false};
    std::thread flood([&] {
      std::deque<int> open;
      while (!stop) {
        const int fd = ConnectTcp(port, "127.0.0.1", "127.0.0.2");
        if (fd >= 0) open.push_back(fd);
        while (open.size() > 400) {
          ::close(open.front());
          open.pop_front();
        }
        std::this_thread::sleep_for(milliseconds(5));
      }
      for (int fd : open) ::close(fd);
    });
    std::this_thread::sleep_for(milliseconds(500));
    for (int scrape = 0; scrape < 3; ++scrape) {
      // A scrape that takes 1 s to send its request (a slow or busy scraper).
      milliseconds took{};
      const std::string answer = Exchange(port, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
                                          milliseconds(4000), &took, milliseconds(1000));
      EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u)
          << s.name << " scrape " << scrape << ": " << answer;
    }
    stop = true;
    flood.join();
    ExpectUp(s, "after the flood");
  }
}

}  // namespace
}  // namespace mlcd::testing
