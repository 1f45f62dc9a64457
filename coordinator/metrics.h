// Prometheus metrics of mlcd-coordinator (docs/metrics.md naming):
//   mlcd_coordinator_jobs{state}                     jobs by state (gauge)
//   mlcd_coordinator_workers{state}                  registered workers by state (gauge)
//   mlcd_coordinator_gang_size                       workers in running gangs (gauge)
//   mlcd_coordinator_jobs_waiting_for_workers        jobs that need a gang and have none (gauge)
//   mlcd_coordinator_gang_starts_total               gangs started
//   mlcd_coordinator_gang_restarts_total             gangs aborted and restarted (failures)
//   mlcd_coordinator_epochs_committed_total          epoch-end checkpoints committed
//   mlcd_coordinator_heartbeats_total                worker heartbeats received
//   mlcd_coordinator_restarts_total                  coordinator starts that reloaded jobs
//   mlcd_coordinator_jobs_recovered_total            unfinished jobs reloaded at start
//   mlcd_coordinator_phase_seconds{phase}            time jobs spent in each state (histogram)
//   mlcd_coordinator_requests_total{method,code}, mlcd_coordinator_request_duration_seconds{method}
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

#include "common/metrics.h"

namespace mlcd::coordinator {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  RpcMetrics& rpc() { return rpc_; }
  void SetJobs(const std::map<std::string, int>& by_state);
  void SetWorkers(const std::map<std::string, int>& by_state);
  void SetGangSize(int workers) { gang_size_.Set(workers); }
  void SetJobsWaitingForWorkers(int jobs) { jobs_waiting_for_workers_.Set(jobs); }
  void GangStarted() { gang_starts_.Increment(); }
  void GangRestarted() { gang_restarts_.Increment(); }
  void EpochCommitted() { epochs_committed_.Increment(); }
  void Heartbeat() { heartbeats_.Increment(); }
  void Restarted(int jobs_recovered);
  void PhaseSeconds(const std::string& phase, double seconds);

 private:
  RpcMetrics rpc_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Gauge& gang_size_;
  prometheus::Gauge& jobs_waiting_for_workers_;
  prometheus::Counter& gang_starts_;
  prometheus::Counter& gang_restarts_;
  prometheus::Counter& epochs_committed_;
  prometheus::Counter& heartbeats_;
  prometheus::Counter& restarts_;
  prometheus::Counter& jobs_recovered_;
  prometheus::Family<prometheus::Histogram>& phase_seconds_;
};

}  // namespace mlcd::coordinator
