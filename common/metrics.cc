#include "common/metrics.h"

#include <pthread.h>

#include <exception>

#include "common/log.h"
#include "common/metrics_http.h"

namespace mlcd {

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
