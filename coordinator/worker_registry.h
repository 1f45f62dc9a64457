// The workers the coordinator knows: registration, liveness, and the state each is in.
//
// A worker registers under a stable name (its slot); the record is persisted so a restarted
// coordinator knows it. It is alive while it polls or heartbeats: an IDLE or DRAINING worker
// silent for `idle_worker_timeout` turns LOST (given no work), and a LOST one silent for
// `lost_worker_expiry` (and its name lease) is forgotten (its record deleted). Which gang a
// worker belongs to is set by the GangScheduler; Release() puts a worker back to IDLE with no
// assignment.
//
// Locking: no mutex of its own. Every method runs with the JobManager's mutex held; the
// entries it hands out are valid while that mutex is held (CheckLiveness may delete them).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/status.h"
#include "coordinator/job_entry.h"
#include "coordinator/store.h"

namespace mlcd::coordinator {

struct WorkerRegistryOptions {
  std::chrono::milliseconds idle_worker_timeout{30000};
  std::chrono::milliseconds lost_worker_expiry{std::chrono::minutes(10)};
  // How long after a worker was last heard from its name stays bound to the identity that
  // registered it (caller_checks.h, CheckReRegistration); a record is kept at least this long.
  std::chrono::milliseconds name_lease{std::chrono::seconds(kDefaultWorkerNameLeaseSeconds)};
};

class WorkerRegistry {
 public:
  // `store` outlives the registry.
  WorkerRegistry(CoordinatorStore* store, WorkerRegistryOptions options)
      : store_(store), options_(options) {}

  // Reloads the persisted workers; each gets the idle timeout (from `now`) to show up.
  Status Load(Clock::time_point now);

  WorkerEntry* Find(const std::string& id);
  size_t size() const { return workers_.size(); }
  bool Alive(const WorkerEntry& worker, Clock::time_point now) const;
  // How long the worker has been silent, and the name lease (options).
  std::chrono::milliseconds Silent(const WorkerEntry& worker, Clock::time_point now) const;
  std::chrono::milliseconds name_lease() const { return options_.name_lease; }
  // Back to IDLE with no assignment, pending work or progress.
  void Release(WorkerEntry* worker);
  // The worker was heard from now (a poll, heartbeat or report).
  void Seen(WorkerEntry* worker, Clock::time_point now);

  // Records a (re)registration by `identity` (Principal::identity, security.h): an existing
  // entry is released (its old process is gone; the caller aborts its gang first), a new one
  // is created. Persists the record, identity included.
  StatusOr<WorkerEntry*> Register(const v1::RegisterWorkerRequest& request,
                                  const std::string& identity, Clock::time_point now);
  // Forgets a worker that left (DeregisterWorker): entry and persisted record.
  Status Remove(const std::string& id);
  // Persists the cordon of a drained worker (no new work while set).
  Status SetCordoned(WorkerEntry* worker, bool cordoned);
  // Marks silent workers LOST and forgets expired ones; true when anything changed.
  bool CheckLiveness(Clock::time_point now);

  // Alive workers, and those of them that can run `kind`.
  void Count(v1::AssignmentKind kind, Clock::time_point now, int* alive, int* capable) const;
  // IDLE, alive workers with nothing pending and a rendezvous port (they may become rank 0),
  // those waiting in a poll first (they get an assignment at once), otherwise by name.
  std::vector<WorkerEntry*> ReadyIdle(Clock::time_point now);

  void List(v1::ListWorkersResponse* response) const;
  // For the gauges: workers per state name.
  std::map<std::string, int> CountByState() const;

 private:
  CoordinatorStore* store_;
  WorkerRegistryOptions options_;
  std::map<std::string, std::unique_ptr<WorkerEntry>> workers_;
};

}  // namespace mlcd::coordinator
