// Prometheus metrics for every process: prometheus-cpp's registry and text format, served by
// the built-in /metrics server (common/metrics_http.h).
//
// Naming (docs/metrics.md): mlcd_<service>_<what>_<unit>, counters end in _total, durations
// are _seconds histograms. Label values must come from bounded sets (method, code, rank,
// variant), never from ids of unbounded cardinality.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace mlcd {

// Latency buckets in seconds, from 50 us to 60 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

class PlainMetricsHttpServer;

// Owns a registry and, once Serve() is called, the HTTP server of GET /metrics
// (common/metrics_http.h: one poll() thread with a deadline per connection, a size bound per
// request and a connection cap). Every process serves its metrics this way. prometheus-cpp's
// civetweb exposer is not used: Debian's civetweb runs its threads on a fixed 100 KiB stack,
// which the process's static TLS shares (OpenBLAS alone takes 60 KiB); clusterd's overflowed
// on its 404 page and the worker's could not start at all.
class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();

  // Serves /metrics on host:port (port 0 picks a free one). Empty address = not served.
  Status Serve(const std::string& address);
  // Bound port after Serve() (0 when not serving).
  int port() const;

  // Another source of metrics served with the registry's (e.g. a proxy of another
  // process's /metrics). Call before Serve().
  void AddCollectable(std::shared_ptr<prometheus::Collectable> collectable) {
    extra_.push_back(std::move(collectable));
  }
  prometheus::Registry& registry() { return *registry_; }
  std::shared_ptr<prometheus::Registry> shared_registry() { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::shared_ptr<prometheus::Collectable>> extra_;
  std::unique_ptr<PlainMetricsHttpServer> server_;
};

// Request counters and latency histograms of one gRPC service:
//   mlcd_<service>_requests_total{method, code}
//   mlcd_<service>_request_duration_seconds{method}
class RpcMetrics {
 public:
  RpcMetrics(prometheus::Registry& registry, const std::string& service);

  // Records one finished call.
  void Record(const std::string& method, StatusCode code, double seconds);
  // Creates the series of `method` (latency histogram, OK count) at zero, so that rate() and
  // increase() see its first call (a series born with its first value hides that value).
  void Declare(const std::string& method);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& durations_;
  Mutex mu_;
  std::map<std::pair<std::string, int>, prometheus::Counter*> counters_ GUARDED_BY(mu_);
  std::map<std::string, prometheus::Histogram*> histograms_ GUARDED_BY(mu_);
};

// Times one call and records it when Finish() is called (or on destruction with UNKNOWN).
class RpcTimer {
 public:
  RpcTimer(RpcMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}
  ~RpcTimer() {
    if (!finished_) Finish(StatusCode::kUnknown);
  }
  RpcTimer(const RpcTimer&) = delete;
  RpcTimer& operator=(const RpcTimer&) = delete;

  double ElapsedSeconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Finish(StatusCode code) {
    finished_ = true;
    if (metrics_) metrics_->Record(method_, code, ElapsedSeconds());
  }
  // Records `status` and returns it (for `return timer.Done(status);`).
  const Status& Done(const Status& status) {
    Finish(status.code());
    return status;
  }

 private:
  RpcMetrics* metrics_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
  bool finished_ = false;
};

}  // namespace mlcd
