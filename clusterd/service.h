// mlcd-clusterd's gRPC service (mlcd.v1.Clusterd): Cluster and Assign with server-streamed
// progress, one heavy job at a time, Prometheus metrics.
//
// Concurrency: k-means and assignment use every core, so jobs run one at a time. A call that
// arrives while a job runs waits in a FIFO queue (it is sent a note with its position) and is
// rejected with RESOURCE_EXHAUSTED when `max_queued` calls already wait. A waiting or running
// call stops promptly when its client cancels (or disconnects, or its deadline passes): the
// job polls ServerContext::IsCancelled between k-means iterations and search chunks, and FAISS
// polls it inside its searches.
//
// Cancelled or failed jobs leave nothing behind: Cluster writes the centroids file only at the
// end (atomically); Assign deletes the label set it created.
//
// Metrics (beside mlcd_clusterd_requests_total / _request_duration_seconds):
//   mlcd_clusterd_jobs_running, mlcd_clusterd_jobs_queued                       gauges
//   mlcd_clusterd_kmeans_iterations_total                                       counter
//   mlcd_clusterd_kmeans_iteration_seconds                                      histogram
//   mlcd_clusterd_kmeans_objective, mlcd_clusterd_kmeans_mean_similarity,
//   mlcd_clusterd_kmeans_imbalance_factor, mlcd_clusterd_kmeans_iteration       gauges (last)
//   mlcd_clusterd_rows_read_total, mlcd_clusterd_assign_rows_total              counters
//   mlcd_clusterd_assign_rows_per_second, mlcd_clusterd_assign_approx_recall,
//   mlcd_clusterd_label_top1_recall, mlcd_clusterd_label_topl_recall,
//   mlcd_clusterd_label_nmi                                                     gauges (last)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "clusterd/job_gate.h"
#include "clusterd/output_area.h"
#include "common/acting_for.h"
#include "common/data_roots.h"
#include "common/metrics.h"
#include "common/status.h"
#include "mlcd/v1/clusterd.grpc.pb.h"

namespace mlcd::clusterd {

struct ClusterdOptions {
  // Relative paths in requests are resolved against this directory (empty = the daemon's
  // working directory).
  std::string data_dir;
  // Every path a request names must resolve under one of these (common/data_roots.h).
  DataRoots data_roots;
  // Where a caller's outputs may go (--output-root; clusterd/output_area.h). Off = anywhere
  // under the data roots.
  OutputAreas output_areas;
  // The label store Assign writes into (--labelstore). A request may not name another: the
  // daemon never dials a caller-chosen address.
  std::string labelstore_address;
  // Calls allowed to wait for the running job before RESOURCE_EXHAUSTED.
  int max_queued = 8;
  // How long Assign waits for the label store to be reachable.
  std::chrono::milliseconds labelstore_connect_timeout{10000};
  // Minimum interval between AssignStatus progress messages.
  std::chrono::milliseconds progress_interval{500};
};

class ClusterdService final : public v1::Clusterd::Service {
 public:
  ClusterdService(ClusterdOptions options, prometheus::Registry& registry);
  ~ClusterdService() override;

  grpc::Status Cluster(grpc::ServerContext* context, const v1::ClusterRequest* request,
                       grpc::ServerWriter<v1::ClusterProgress>* writer) override;
  grpc::Status Assign(grpc::ServerContext* context, const v1::AssignRequest* request,
                      grpc::ServerWriter<v1::AssignProgress>* writer) override;

  // The jobs behind the RPCs, transport-free: `emit` receives every progress message (the
  // result last), `should_stop` is polled. Used by the RPCs and by in-process callers.
  // `acting_for` is whom the call is made for (the RPC's caller, or whom a calling service
  // names): every label-store call of an Assign acts for it, so the label store decides
  // ownership as if that identity had called (common/acting_for.h). Empty = clusterd itself.
  Status RunCluster(const v1::ClusterRequest& request, const std::function<bool()>& should_stop,
                    const std::function<void(const v1::ClusterProgress&)>& emit,
                    v1::ClusterResult* result, const ActingFor& acting_for = {});
  Status RunAssign(const v1::AssignRequest& request, const std::function<bool()>& should_stop,
                   const std::function<void(const v1::AssignProgress&)>& emit,
                   v1::AssignResult* result, const ActingFor& acting_for = {});

 private:
  struct Metrics;
  // A request's path: relative ones under data_dir, then confined to the data roots.
  StatusOr<std::string> Resolve(const std::string& path, const std::string& field) const;
  // Resolve as a PathResolver (clusterd/output_area.h).
  PathResolver Resolver() const;
  // AssignCallbacks::on_progress of an Assign pass started now: counts rows in the metrics and
  // emits an AssignStatus (seconds since t0) at most every progress_interval and at the end.
  std::function<void(int64_t, int64_t)> AssignProgressReporter(
      const std::function<void(const v1::AssignProgress&)>& emit,
      std::chrono::steady_clock::time_point t0);

  ClusterdOptions options_;
  JobGate gate_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<Metrics> metrics_;
};

}  // namespace mlcd::clusterd
