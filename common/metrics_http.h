// The HTTP server of GET /metrics in every process (coordinator, label store, clusterd, worker
// agent and train child; common/metrics.h owns it). prometheus-cpp's civetweb server is not
// used: its fixed 100 KiB thread stacks overflowed in clusterd and could not start
// at all beside LibTorch.
//
// One thread serves every connection with poll(), so a client that connects and sends
// nothing, or trickles its request a byte at a time (slowloris), cannot hold up the scrapes
// of others (this server used to read one connection at a time). Each connection
// has request_timeout from its accept to send its request, take the answer and close; then
// it is closed. At most max_connections_per_source are open from one source address: a new
// one beyond that is refused (closed at once), so the open ones, a scrape among them, are
// served to their end whatever rate another client connects at. At most max_connections are
// open in all: beyond that, a new connection takes the place of the oldest of the source
// holding the most, when that holds at least two more than the newcomer's, else is refused. What is answered to which request (200, 400, 404, 405, 431) is
// common/metrics_http_request.h's; one request per connection (Connection: close).
#pragma once

#include <prometheus/collectable.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/limits.h"
#include "common/status.h"

namespace mlcd {

struct MetricsHttpOptions {
  // From accept to the last byte of the answer; a connection still busy then is closed.
  std::chrono::milliseconds request_timeout{kMetricsHttpRequestTimeoutMs};
  // The request line and headers, "\r\n\r\n" included.
  size_t max_request_bytes = kMaxMetricsHttpRequestBytes;
  // Connections open at once.
  size_t max_connections = kMaxMetricsHttpConnections;
  // Connections open at once from one source address (IPv4, IPv6; every adopted socket that
  // is not TCP counts as one source).
  size_t max_connections_per_source = kMaxMetricsHttpConnectionsPerSource;
};

class PlainMetricsHttpServer {
 public:
  // Serves the metrics of `sources` (collected at each request).
  explicit PlainMetricsHttpServer(std::vector<std::shared_ptr<prometheus::Collectable>> sources,
                                  MetricsHttpOptions options = {});
  ~PlainMetricsHttpServer();  // stops the thread and closes every connection
  PlainMetricsHttpServer(const PlainMetricsHttpServer&) = delete;
  PlainMetricsHttpServer& operator=(const PlainMetricsHttpServer&) = delete;

  // Listens on host:port (port 0 picks a free one) and starts serving.
  Status Start(const std::string& address);
  // The bound port after Start().
  int port() const { return port_; }
  // Serves `fd`, an already connected stream socket (one end of a socketpair, a connection
  // accepted elsewhere), as if accepted now: same deadline, same cap. The server owns it from
  // here on. Call after Start().
  void Adopt(int fd);

 private:
  struct Connection;
  void Loop();
  // Reads what the connection sent; queues the answer once the request is complete.
  // False when the connection is done (closed by the peer, or an error).
  bool Receive(Connection* c);
  // Sends queued answer bytes, then half-closes; false on an error.
  bool Send(Connection* c);
  void Accept(std::vector<std::unique_ptr<Connection>>* conns);
  // Adds connection `fd` (non-blocking), or closes it when a cap refuses it (above).
  void Add(int fd, std::vector<std::unique_ptr<Connection>>* conns);
  // Reads the wake pipe: adopted descriptors, or kStopWord. False when told to stop.
  bool TakeAdopted(std::vector<std::unique_ptr<Connection>>* conns);
  std::string Answer(const Connection& c) const;

  std::vector<std::shared_ptr<prometheus::Collectable>> sources_;
  MetricsHttpOptions options_;
  int listen_fd_ = -1;
  // The loop's wake-up: Adopt() writes the descriptor (an int, atomically: below PIPE_BUF),
  // the destructor kStopWord. No lock needed.
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mlcd
