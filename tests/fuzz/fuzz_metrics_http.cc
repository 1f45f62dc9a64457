// libFuzzer target: the /metrics HTTP endpoint of every process: the request
// parser (common/metrics_http_request.h) and the real server (common/metrics_http.h) over a
// socketpair. Input: byte 0 picks the client, byte 1 seeds the chunk sizes, the rest is what
// the client sends (paths, methods, headers, garbage).
//   - The parser fed the bytes at once and in chunks gives one verdict, and a verdict once
//     final stays (what the server answers cannot depend on how TCP split the request).
//   - The server gets the bytes in those chunks from a client that then half-closes, keeps
//     the connection open, or closes without reading (a broken client). The answer read
//     back is one HTTP/1.1 response whose status is the parser's verdict, with a
//     Content-Length that matches its body, and the server closes after it; a request that
//     is not complete gets no answer.
// Signals: libFuzzer's -timeout runs a SIGALRM timer (every timeout/2 + 1 s, no SA_RESTART),
// so every blocking call here may fail with EINTR, and a blocking send may send part of a
// chunk. Each retries (SendAll, PollIn, ReadToEnd): an interrupted 2 ms poll once read as "the
// server answered an incomplete request" and aborted the fuzz stage after 6 s (seed 1;
// tests/fuzz/corpus/metrics_http/regression_*; the replay test runs under such a timer).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics_http.h"
#include "common/metrics_http_request.h"

namespace {

using mlcd::MetricsHttpVerdict;
using mlcd::MetricsRequestParser;

// Small enough for a fuzzer to reach 431.
constexpr size_t kMaxRequestBytes = 300;

void Check(bool ok) {
  if (!ok) std::abort();
}

// Chunk sizes 1..16 from a tiny generator seeded by `seed`.
std::vector<std::string_view> Chunks(std::string_view bytes, uint8_t seed) {
  std::vector<std::string_view> out;
  uint32_t state = seed * 2654435761u + 1;
  while (!bytes.empty()) {
    state = state * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(bytes.size(), 1 + (state >> 16) % 16);
    out.push_back(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return out;
}

MetricsRequestParser ParseChecked(std::string_view bytes,
                                  const std::vector<std::string_view>& chunks) {
  MetricsRequestParser whole(kMaxRequestBytes);
  whole.Feed(bytes);
  MetricsRequestParser pieces(kMaxRequestBytes);
  MetricsHttpVerdict first_final = MetricsHttpVerdict::kIncomplete;
  for (std::string_view chunk : chunks) {
    const MetricsHttpVerdict v = pieces.Feed(chunk);
    if (first_final == MetricsHttpVerdict::kIncomplete) first_final = v;
    Check(first_final == MetricsHttpVerdict::kIncomplete || v == first_final);
  }
  Check(pieces.verdict() == whole.verdict());
  Check(pieces.head() == whole.head());
  return whole;
}

mlcd::PlainMetricsHttpServer& Server() {
  static mlcd::PlainMetricsHttpServer* server = [] {
    auto registry = std::make_shared<prometheus::Registry>();
    prometheus::BuildCounter().Name("mlcd_fuzz_total").Help("x").Register(*registry).Add({});
    mlcd::MetricsHttpOptions options;
    options.request_timeout = std::chrono::seconds(3);
    options.max_request_bytes = kMaxRequestBytes;
    options.max_connections = 8;
    auto* s = new mlcd::PlainMetricsHttpServer({registry}, options);
    Check(s->Start("127.0.0.1:0").ok());
    return s;
  }();
  return *server;
}

// Sends all of `bytes` (a blocking send interrupted by a signal may send part, or nothing);
// false when the server has closed (EPIPE, ECONNRESET).
bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Whether `fd` turns readable (data, or the server's close) within `ms`, across signals.
bool PollIn(int fd, std::chrono::milliseconds ms) {
  const auto deadline = std::chrono::steady_clock::now() + ms;
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n > 0) return true;
    if (n == 0) return false;
    Check(errno == EINTR);
  }
}

// Everything the server sends until it closes; aborts when it neither answers nor closes.
std::string ReadToEnd(int fd) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!PollIn(fd, std::chrono::milliseconds(100))) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
  std::abort();  // the server kept the connection past its deadline
}

void CheckAnswer(const std::string& answer, const MetricsRequestParser& request) {
  if (request.verdict() == MetricsHttpVerdict::kIncomplete) {
    Check(answer.empty());
    return;
  }
  const std::string status = std::string("HTTP/1.1 ") + mlcd::MetricsHttpStatus(request.verdict());
  Check(answer.rfind(status + "\r\n", 0) == 0);
  const size_t end = answer.find("\r\n\r\n");
  Check(end != std::string::npos);
  const std::string head = answer.substr(0, end);
  const size_t length_at = head.find("\r\nContent-Length: ");
  Check(length_at != std::string::npos);
  const size_t length = std::strtoul(head.c_str() + length_at + 18, nullptr, 10);
  const size_t body = answer.size() - end - 4;
  Check(request.head() ? body == 0 : body == length);
  Check(request.verdict() != MetricsHttpVerdict::kMetrics || request.head() ||
        answer.find("mlcd_fuzz_total 0") != std::string::npos);
}

enum class Client { kHalfClose, kKeepOpen, kBroken, kHalfCloseEarly };

void DriveServer(Client client, const std::vector<std::string_view>& chunks,
                 const MetricsRequestParser& request) {
  int sv[2];
  Check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  Server().Adopt(sv[1]);
  const int fd = sv[0];
  size_t sent_chunks = 0;
  for (std::string_view chunk : chunks) {
    if (client == Client::kHalfCloseEarly && sent_chunks == chunks.size() / 2) break;
    // The server may close first (after answering 431 or 400 it drains, then stops at the
    // deadline): a failed send ends the request.
    if (!SendAll(fd, chunk)) break;
    ++sent_chunks;
  }
  if (client == Client::kBroken) {
    ::close(fd);
    return;
  }
  if (client == Client::kHalfClose) {
    ::shutdown(fd, SHUT_WR);
    CheckAnswer(ReadToEnd(fd), request);
  } else if (client == Client::kHalfCloseEarly) {
    ::shutdown(fd, SHUT_WR);
    (void)ReadToEnd(fd);  // whatever it made of a part: it must still close
  } else if (request.verdict() != MetricsHttpVerdict::kIncomplete) {
    CheckAnswer(ReadToEnd(fd), request);
  } else {
    Check(!PollIn(fd, std::chrono::milliseconds(2)));  // waiting for the rest, not answering
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Client client = static_cast<Client>(data[0] % 4);
  const std::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);
  const std::vector<std::string_view> chunks = Chunks(bytes, data[1]);
  const MetricsRequestParser request = ParseChecked(bytes, chunks);
  DriveServer(client, chunks, request);
  return 0;
}
