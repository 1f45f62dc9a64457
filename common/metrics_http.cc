#include "common/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "common/log.h"
#include "common/metrics_http_request.h"
#include "common/net.h"

namespace mlcd {
namespace {

// Written into the wake pipe by the destructor (descriptors are never negative).
constexpr int kStopWord = -1;

// The address `fd` is connected from: the IP address's bytes for TCP, "" for anything else
// (a socketpair's end), so that all of those count as one source.
std::string SourceOf(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return "";
  if (peer.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(peer).sin_addr;
    return std::string(reinterpret_cast<const char*>(&a), sizeof(a));
  }
  if (peer.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
    // An IPv4-mapped address is its IPv4 source.
    if (IN6_IS_ADDR_V4MAPPED(&a)) return std::string(reinterpret_cast<const char*>(&a) + 12, 4);
    return std::string(reinterpret_cast<const char*>(&a), sizeof(a));
  }
  return "";
}

}  // namespace

struct PlainMetricsHttpServer::Connection {
  explicit Connection(size_t max_request_bytes) : request(max_request_bytes) {}
  int fd = -1;
  std::string source;  // SourceOf(fd)
  std::chrono::steady_clock::time_point deadline;
  MetricsRequestParser request;
  std::string out;  // the answer, once the request is complete
  size_t sent = 0;
  // Reading the request, sending the answer, then reading (and dropping) what the client
  // still sends until it closes: closing with unread input would reset the connection and
  // could destroy the answer in flight (a 431 to an oversized request, typically).
  enum class Phase { kRequest, kAnswer, kDrain } phase = Phase::kRequest;
  ~Connection() {
    if (fd >= 0) ::close(fd);
  }
};

PlainMetricsHttpServer::PlainMetricsHttpServer(
    std::vector<std::shared_ptr<prometheus::Collectable>> sources, MetricsHttpOptions options)
    : sources_(std::move(sources)), options_(options) {}

PlainMetricsHttpServer::~PlainMetricsHttpServer() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!::write(wake_[1], &kStopWord, sizeof(kStopWord));
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

Status PlainMetricsHttpServer::Start(const std::string& address) {
  std::string host;
  int port = 0;
  MLCD_RETURN_IF_ERROR(SplitHostPort(address, "--metrics-listen", &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0)
    return Status::InvalidArgument("--metrics-listen " + address + ": " + ::gai_strerror(rc));
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) return Status::Unavailable("cannot listen on " + address + ": " + error);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  if (::pipe2(wake_, O_CLOEXEC) != 0)
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void PlainMetricsHttpServer::Loop() {
  // Oldest first: deadlines are in accept order.
  std::vector<std::unique_ptr<Connection>> conns;
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.assign({{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}});
    for (const auto& c : conns)
      fds.push_back({c->fd,
                     static_cast<short>(c->phase == Connection::Phase::kAnswer ? POLLOUT : POLLIN),
                     0});
    int timeout_ms = -1;
    if (!conns.empty()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(
          conns.front()->deadline - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      MLCD_LOG(ERROR) << "metrics server: poll failed: " << std::strerror(errno) << "; stopping";
      return;
    }
    if (stop_) return;
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<Connection>> open;
    open.reserve(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection* c = conns[i].get();
      bool keep = true;
      const short revents = fds[i + 2].revents;
      if (revents & (POLLERR | POLLNVAL)) {
        keep = false;
      } else if (revents & (POLLIN | POLLHUP) && c->phase != Connection::Phase::kAnswer) {
        keep = Receive(c);
      }
      if (keep && c->phase == Connection::Phase::kAnswer && (revents & POLLOUT || c->sent == 0))
        keep = Send(c);
      if (keep && now >= c->deadline) keep = false;  // too slow: slowloris or a stalled reader
      if (keep) open.push_back(std::move(conns[i]));
    }
    conns = std::move(open);
    if (fds[0].revents & POLLIN) Accept(&conns);
    if ((fds[1].revents & POLLIN) && !TakeAdopted(&conns)) return;
  }
}

void PlainMetricsHttpServer::Adopt(int fd) {
  if (fd < 0) return;
  if (wake_[1] < 0 || ::write(wake_[1], &fd, sizeof(fd)) != static_cast<ssize_t>(sizeof(fd)))
    ::close(fd);  // not started (or the pipe is gone): nobody would serve it
}

bool PlainMetricsHttpServer::TakeAdopted(std::vector<std::unique_ptr<Connection>>* conns) {
  int fd = 0;
  // One word per poll round is enough: the pipe stays readable while more are queued.
  if (::read(wake_[0], &fd, sizeof(fd)) != static_cast<ssize_t>(sizeof(fd))) return !stop_;
  if (fd == kStopWord) return false;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    ::close(fd);
    return true;
  }
  Add(fd, conns);
  return true;
}

void PlainMetricsHttpServer::Accept(std::vector<std::unique_ptr<Connection>>* conns) {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors or memory: the listener stays readable, so do not spin on it.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;  // EAGAIN: none left (or a transient error: poll again)
    }
    Add(fd, conns);
  }
}

void PlainMetricsHttpServer::Add(int fd, std::vector<std::unique_ptr<Connection>>* conns) {
  std::string source = SourceOf(fd);
  std::unordered_map<std::string, size_t> open;
  for (const auto& c : *conns) ++open[c->source];
  const size_t mine = open[source];
  // A source at its cap gets no more: its newest is refused, its open ones served.
  if (mine >= options_.max_connections_per_source) {
    ::close(fd);
    return;
  }
  if (conns->size() >= options_.max_connections) {
    // At the server's cap, the source holding the most connections gives up its oldest when
    // it holds at least two more than this one (so it still holds no fewer after); else the
    // newest is refused. A flood thus never pushes out a source that holds fewer.
    auto heaviest = conns->end();
    for (auto it = conns->begin(); it != conns->end(); ++it) {
      if (heaviest == conns->end() || open[(*it)->source] > open[(*heaviest)->source])
        heaviest = it;
    }
    if (heaviest == conns->end() || open[(*heaviest)->source] <= mine + 1) {
      ::close(fd);
      return;
    }
    conns->erase(heaviest);
  }
  auto c = std::make_unique<Connection>(options_.max_request_bytes);
  c->fd = fd;
  c->source = std::move(source);
  c->deadline = std::chrono::steady_clock::now() + options_.request_timeout;
  conns->push_back(std::move(c));
}

bool PlainMetricsHttpServer::Receive(Connection* c) {
  // In kDrain: until the client closes (recv 0) or errs, at most 64 KiB per call so that a
  // client sending without end cannot keep the loop from the others.
  char buf[2048];
  for (int reads = 0; reads < 32; ++reads) {
    ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (c->phase == Connection::Phase::kDrain) continue;
    if (c->request.Feed(std::string_view(buf, static_cast<size_t>(n))) ==
        MetricsHttpVerdict::kIncomplete)
      continue;
    c->out = Answer(*c);
    c->phase = Connection::Phase::kAnswer;
    return true;
  }
  return true;  // more to read: poll again
}

bool PlainMetricsHttpServer::Send(Connection* c) {
  while (c->sent < c->out.size()) {
    ssize_t n = ::send(c->fd, c->out.data() + c->sent, c->out.size() - c->sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c->sent += static_cast<size_t>(n);
  }
  ::shutdown(c->fd, SHUT_WR);
  c->phase = Connection::Phase::kDrain;  // closed when the client closes, or at the deadline
  return true;
}

std::string PlainMetricsHttpServer::Answer(const Connection& c) const {
  std::string text;
  if (c.request.verdict() == MetricsHttpVerdict::kMetrics) {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& source : sources_) {
      auto more = source->Collect();
      families.insert(families.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
    }
    text = prometheus::TextSerializer().Serialize(families);
  }
  return MetricsHttpAnswer(c.request.verdict(), c.request.head(), text, options_.max_request_bytes);
}

}  // namespace mlcd
