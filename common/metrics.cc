#include "common/metrics.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prometheus/text_serializer.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/net.h"

namespace mlcd {

// GET /metrics over HTTP/1.1 (one request per connection) from one std::thread, whose stack
// is the process default. Only used where civetweb's threads cannot start (see metrics.h).
class PlainMetricsHttpServer {
 public:
  explicit PlainMetricsHttpServer(std::vector<std::shared_ptr<prometheus::Collectable>> sources)
      : sources_(std::move(sources)) {}
  ~PlainMetricsHttpServer() {
    stop_ = true;
    if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
    if (thread_.joinable()) thread_.join();
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

  Status Start(const std::string& address) {
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
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
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
      port_ = bound.ss_family == AF_INET6
                  ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                  : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
    if (::pipe2(wake_, O_CLOEXEC) != 0)
      return Status::Internal(std::string("pipe: ") + std::strerror(errno));
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  int port() const { return port_; }

 private:
  void Loop() {
    while (!stop_) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (stop_ || (fds[1].revents & POLLIN)) return;
      if (!(fds[0].revents & POLLIN)) continue;
      int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      timeval timeout{2, 0};
      ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
      ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
      Handle(conn);
      ::close(conn);
    }
  }

  void Handle(int conn) {
    std::string request;
    char buf[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
      ssize_t n = ::recv(conn, buf, sizeof(buf), 0);
      if (n <= 0) return;
      request.append(buf, static_cast<size_t>(n));
    }
    const std::string line = request.substr(0, request.find("\r\n"));
    std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
    if (line.rfind("GET ", 0) != 0 && line.rfind("HEAD ", 0) != 0) {
      status = "405 Method Not Allowed";
      body = "only GET /metrics\n";
    } else if (line.find(" /metrics ") == std::string::npos &&
               line.find(" /metrics?") == std::string::npos) {
      status = "404 Not Found";
      body = "metrics are at /metrics\n";
    } else {
      std::vector<prometheus::MetricFamily> families;
      for (const auto& source : sources_) {
        auto more = source->Collect();
        families.insert(families.end(), std::make_move_iterator(more.begin()),
                        std::make_move_iterator(more.end()));
      }
      body = prometheus::TextSerializer().Serialize(families);
    }
    if (status != "200 OK") type = "text/plain; charset=utf-8";
    std::string response = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                           "\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nConnection: close\r\n\r\n";
    if (line.rfind("HEAD ", 0) != 0) response += body;
    size_t sent = 0;
    while (sent < response.size()) {
      ssize_t n = ::send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  std::vector<std::shared_ptr<prometheus::Collectable>> sources_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
      0.1,  0.25, 0.5,    1,    2.5,  5,      10,   30,   60};
  return kBuckets;
}

MetricsServer::MetricsServer() : registry_(std::make_shared<prometheus::Registry>()) {}

MetricsServer::~MetricsServer() = default;

namespace {

// Debian's civetweb 1.15 starts every thread with a fixed 100 KiB stack (USE_STACK_SIZE).
// glibc refuses such a thread when the process's static TLS does not fit in it.
constexpr size_t kCivetwebThreadStack = 102400;

bool CivetwebThreadsCanStart() {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_attr_setstacksize(&attr, kCivetwebThreadStack);
  pthread_t thread;
  int rc = pthread_create(
      &thread, &attr, [](void*) -> void* { return nullptr; }, nullptr);
  pthread_attr_destroy(&attr);
  if (rc == 0) pthread_join(thread, nullptr);
  return rc == 0;
}

}  // namespace

Status MetricsServer::Serve(const std::string& address) {
  if (address.empty()) return Status::Ok();
  if (!CivetwebThreadsCanStart()) {
    std::vector<std::shared_ptr<prometheus::Collectable>> sources = {registry_};
    sources.insert(sources.end(), extra_.begin(), extra_.end());
    auto fallback = std::make_unique<PlainMetricsHttpServer>(std::move(sources));
    Status s = fallback->Start(address);
    if (!s.ok()) {
      return Status::Unavailable("cannot serve /metrics on " + address + ": " + s.message() +
                                 " (is the port in use? pick another with --metrics-listen)");
    }
    fallback_ = std::move(fallback);
    MLCD_LOG(INFO) << "serving Prometheus metrics on " << address << " (port " << fallback_->port()
                   << ") at /metrics (built-in server: civetweb's 100 KiB thread stacks are too "
                      "small for this "
                      "process's static TLS)";
    return Status::Ok();
  }
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return Status::Unavailable("cannot serve /metrics on " + address + ": " + e.what() +
                               " (is the port in use? pick another with --metrics-listen)");
  }
  exposer_->RegisterCollectable(registry_);
  for (const auto& c : extra_) exposer_->RegisterCollectable(c);
  auto ports = exposer_->GetListeningPorts();
  MLCD_LOG(INFO) << "serving Prometheus metrics on " << address << " (port "
                 << (ports.empty() ? 0 : ports[0]) << ") at /metrics";
  return Status::Ok();
}

int MetricsServer::port() const {
  if (fallback_) return fallback_->port();
  if (!exposer_) return 0;
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports[0];
}

RpcMetrics::RpcMetrics(prometheus::Registry& registry, const std::string& service)
    : requests_(prometheus::BuildCounter()
                    .Name("mlcd_" + service + "_requests_total")
                    .Help("gRPC requests handled, by method and status code")
                    .Register(registry)),
      durations_(prometheus::BuildHistogram()
                     .Name("mlcd_" + service + "_request_duration_seconds")
                     .Help("gRPC request latency in seconds, by method")
                     .Register(registry)) {}

void RpcMetrics::Declare(const std::string& method) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_pair(method, static_cast<int>(StatusCode::kOk));
  if (!counters_.count(key)) {
    counters_.emplace(
        key, &requests_.Add({{"method", method}, {"code", StatusCodeName(StatusCode::kOk)}}));
  }
  if (!histograms_.count(method))
    histograms_.emplace(method, &durations_.Add({{"method", method}}, LatencyBuckets()));
}

void RpcMetrics::Record(const std::string& method, StatusCode code, double seconds) {
  prometheus::Counter* counter;
  prometheus::Histogram* histogram;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_pair(method, static_cast<int>(code));
    auto it = counters_.find(key);
    if (it == counters_.end()) {
      it = counters_
               .emplace(key, &requests_.Add({{"method", method}, {"code", StatusCodeName(code)}}))
               .first;
    }
    counter = it->second;
    auto hit = histograms_.find(method);
    if (hit == histograms_.end()) {
      hit = histograms_.emplace(method, &durations_.Add({{"method", method}}, LatencyBuckets()))
                .first;
    }
    histogram = hit->second;
  }
  counter->Increment();
  histogram->Observe(seconds);
}

}  // namespace mlcd
