#include "coordinator/metrics.h"

namespace mlcd::coordinator {
namespace {

const prometheus::Histogram::BucketBoundaries& PhaseBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600};
  return kBuckets;
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry)
    : rpc_(registry, "coordinator"),
      jobs_(prometheus::BuildGauge()
                .Name("mlcd_coordinator_jobs")
                .Help("Jobs by state.")
                .Register(registry)),
      workers_(prometheus::BuildGauge()
                   .Name("mlcd_coordinator_workers")
                   .Help("Registered workers by state (idle, busy, draining, lost).")
                   .Register(registry)),
      gang_size_(prometheus::BuildGauge()
                     .Name("mlcd_coordinator_gang_size")
                     .Help("Workers in the gangs running now.")
                     .Register(registry)
                     .Add({})),
      jobs_waiting_for_workers_(
          prometheus::BuildGauge()
              .Name("mlcd_coordinator_jobs_waiting_for_workers")
              .Help("Jobs in TRAINING, EXTRACTING or EVALUATING that have no gang and wait "
                    "for workers to form one.")
              .Register(registry)
              .Add({})),
      gang_starts_(prometheus::BuildCounter()
                       .Name("mlcd_coordinator_gang_starts_total")
                       .Help("Gangs started (first starts and restarts).")
                       .Register(registry)
                       .Add({})),
      gang_restarts_(
          prometheus::BuildCounter()
              .Name("mlcd_coordinator_gang_restarts_total")
              .Help("Gangs aborted by a failed or silent worker and restarted from a checkpoint.")
              .Register(registry)
              .Add({})),
      epochs_committed_(prometheus::BuildCounter()
                            .Name("mlcd_coordinator_epochs_committed_total")
                            .Help("Epoch-end checkpoints committed.")
                            .Register(registry)
                            .Add({})),
      heartbeats_(prometheus::BuildCounter()
                      .Name("mlcd_coordinator_heartbeats_total")
                      .Help("Worker heartbeats received.")
                      .Register(registry)
                      .Add({})),
      restarts_(prometheus::BuildCounter()
                    .Name("mlcd_coordinator_restarts_total")
                    .Help("Coordinator starts on an existing database (recoveries).")
                    .Register(registry)
                    .Add({})),
      jobs_recovered_(prometheus::BuildCounter()
                          .Name("mlcd_coordinator_jobs_recovered_total")
                          .Help("Unfinished jobs reloaded from the database at start.")
                          .Register(registry)
                          .Add({})),
      phase_seconds_(prometheus::BuildHistogram()
                         .Name("mlcd_coordinator_phase_seconds")
                         .Help("Time jobs spent in each state before leaving it.")
                         .Register(registry)) {
  SetJobs({});
  // The states a job leaves, at zero: increase() then sees the first job leaving each.
  for (const char* phase :
       {"PENDING", "CLUSTERING", "ASSIGNING", "TRAINING", "EXTRACTING", "EVALUATING"}) {
    phase_seconds_.Add({{"phase", phase}}, PhaseBuckets());
  }
  for (const char* method :
       {"SubmitJob", "GetJob", "ListJobs", "CancelJob", "WatchJob", "RegisterWorker",
        "GetAssignment", "Heartbeat", "ReportAssignment", "ListWorkers"}) {
    rpc_.Declare(method);
  }
}

void CoordinatorMetrics::SetJobs(const std::map<std::string, int>& by_state) {
  for (const char* state : {"PENDING", "CLUSTERING", "ASSIGNING", "TRAINING", "EXTRACTING",
                            "EVALUATING", "SUCCEEDED", "FAILED", "CANCELLED"}) {
    auto it = by_state.find(state);
    jobs_.Add({{"state", state}}).Set(it == by_state.end() ? 0 : it->second);
  }
}

void CoordinatorMetrics::SetWorkers(const std::map<std::string, int>& by_state) {
  for (const char* state : {"idle", "busy", "draining", "lost"}) {
    auto it = by_state.find(state);
    workers_.Add({{"state", state}}).Set(it == by_state.end() ? 0 : it->second);
  }
}

void CoordinatorMetrics::Restarted(int jobs_recovered) {
  restarts_.Increment();
  jobs_recovered_.Increment(jobs_recovered);
}

void CoordinatorMetrics::PhaseSeconds(const std::string& phase, double seconds) {
  phase_seconds_.Add({{"phase", phase}}, PhaseBuckets()).Observe(seconds);
}

}  // namespace mlcd::coordinator
