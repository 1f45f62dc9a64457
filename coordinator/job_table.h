// The coordinator's jobs in memory and the one way their changes reach disk and watchers.
//
// JobTable owns the JobEntry of every job (finished ones included) and writes a job's record
// with its new history entries in one synced batch (Persist). A failed write is fatal: what
// the coordinator does next would no longer match what a restart reads, so the process
// aborts (fail-stop; docs/hardening.md, "Disk full"), except during the reload at start-up. Touch() marks a visible change and wakes WatchJob.
//
// Locking: no mutex of its own. Every method runs with the JobManager's mutex held; the
// entries it hands out are valid while that mutex is held (jobs are never removed).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/job_entry.h"
#include "coordinator/store.h"

namespace mlcd::coordinator {

class JobTable {
 public:
  // `store` and `changed` (notified by Touch) outlive the table.
  JobTable(CoordinatorStore* store, std::condition_variable* changed)
      : store_(store), changed_(changed) {}

  JobEntry* Find(const std::string& id);
  // Takes the entry under its job id; returns it.
  JobEntry* Add(std::unique_ptr<JobEntry> entry);
  std::map<std::string, std::unique_ptr<JobEntry>>& all() { return jobs_; }
  const std::map<std::string, std::unique_ptr<JobEntry>>& all() const { return jobs_; }
  size_t size() const { return jobs_.size(); }
  // Jobs not in a terminal state.
  int CountActive() const;

  // A history entry of the job in its current state (next sequence number, now).
  v1::JobHistoryEntry NewHistory(JobEntry* job, const std::string& kind,
                                 const std::string& message = "");
  // Writes the job record and `history` in one synced batch (sets updated_unix_ms); aborts
  // the process when the write fails, except while loading (below).
  void Persist(JobEntry* job, std::vector<v1::JobHistoryEntry> history = {});
  // Between BeginLoad and EndLoad (the reload at start-up, before anything was served or
  // acted on) a failed write does not abort: EndLoad returns the first failure, and the
  // caller gives up the whole load (the coordinator exits with that message).
  void BeginLoad();
  Status EndLoad();
  // A visible change: bumps the version and wakes watchers.
  void Touch(JobEntry* job);
  // Sets the progress detail; watchers hear of it when it changed.
  void SetDetail(JobEntry* job, const std::string& detail);
  // The job as users see it (phase_seconds include the time in the current state).
  v1::Job PublicJob(const JobEntry& job) const;

  // For the gauges: jobs per state name, workers in running gangs.
  std::map<std::string, int> CountByState() const;
  int GangMembers() const;

 private:
  CoordinatorStore* store_;
  std::condition_variable* changed_;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  bool loading_ = false;
  Status load_status_;
};

}  // namespace mlcd::coordinator
