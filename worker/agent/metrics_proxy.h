// The agent's /metrics (`mlcd-worker agent --metrics-listen`): always served, so a worker
// target is up whether or not it trains, with the metrics of the running training child
// (its --metrics-listen, on loopback) merged in (docs/metrics.md, "Worker agent").
//
// ChildMetricsProxy is a prometheus::Collectable: each scrape of the agent fetches the
// child's /metrics over HTTP (a short timeout; nothing when no child serves) and parses the
// text exposition format back into metric families, so the agent serves one document.
// No torch here.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace mlcd::worker {

// Parses Prometheus' text exposition format (version 0.0.4) as prometheus-cpp writes it:
// counters, gauges and histograms become families of their type (a histogram's _bucket,
// _sum and _count lines one family), anything else untyped samples. Lines that do not
// parse are skipped.
std::vector<prometheus::MetricFamily> ParseMetricsText(const std::string& text);

class ChildMetricsProxy : public prometheus::Collectable {
 public:
  explicit ChildMetricsProxy(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000))
      : timeout_(timeout) {}
  // HOST:PORT of the child's /metrics while one runs; "" when none does.
  void SetTarget(const std::string& address);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::chrono::milliseconds timeout_;
  mutable Mutex mu_;
  std::string target_ GUARDED_BY(mu_);
};

// The agent's own series:
//   mlcd_agent_busy                        gauge    1 while an assignment runs
//   mlcd_agent_assignments_total{kind,result}  counter  assignments ended, by kind
//                                                   (train, embed, eval) and result
//                                                   (succeeded, failed, preempted)
class AgentMetrics {
 public:
  explicit AgentMetrics(prometheus::Registry& registry);
  void Busy(bool busy) { busy_->Set(busy ? 1 : 0); }
  void AssignmentEnded(const std::string& kind, const std::string& result);

 private:
  prometheus::Gauge* busy_;
  prometheus::Family<prometheus::Counter>* assignments_;
};

}  // namespace mlcd::worker
