#include "common/metrics.h"

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

Status MetricsServer::Serve(const std::string& address) {
  if (address.empty()) return Status::Ok();
  std::vector<std::shared_ptr<prometheus::Collectable>> sources = {registry_};
  sources.insert(sources.end(), extra_.begin(), extra_.end());
  auto server = std::make_unique<PlainMetricsHttpServer>(std::move(sources));
  Status s = server->Start(address);
  if (!s.ok()) {
    return Status::Unavailable("cannot serve /metrics on " + address + ": " + s.message() +
                               " (is the port in use? pick another with --metrics-listen)");
  }
  server_ = std::move(server);
  MLCD_LOG(INFO) << "serving Prometheus metrics on " << address << " (port " << server_->port()
                 << ") at /metrics";
  return Status::Ok();
}

int MetricsServer::port() const { return server_ ? server_->port() : 0; }

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
  MutexLock lock(&mu_);
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
    MutexLock lock(&mu_);
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
