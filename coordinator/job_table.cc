#include "coordinator/job_table.h"

#include <cstdlib>

#include "common/clock.h"
#include "common/log.h"

namespace mlcd::coordinator {

JobEntry* JobTable::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

JobEntry* JobTable::Add(std::unique_ptr<JobEntry> entry) {
  JobEntry* job = entry.get();
  jobs_[job->job().id()] = std::move(entry);
  return job;
}

v1::JobHistoryEntry JobTable::NewHistory(JobEntry* job, const std::string& kind,
                                         const std::string& message) {
  v1::JobHistoryEntry entry;
  int64_t seq = job->rec.next_history_seq();
  if (seq == 0) seq = 1;
  job->rec.set_next_history_seq(seq + 1);
  entry.set_seq(seq);
  entry.set_unix_ms(NowUnixMs());
  entry.set_kind(kind);
  entry.set_state(job->state());
  entry.set_round(job->job().progress().round());
  entry.set_message(message);
  if (job->rec.has_attempt()) entry.set_attempt_id(job->rec.attempt().id());
  return entry;
}

void JobTable::Persist(JobEntry* job, std::vector<v1::JobHistoryEntry> history) {
  job->job().set_updated_unix_ms(NowUnixMs());
  StoreBatch batch;
  // Each entry keeps the state it was made in (a gang abort written with the FAILED or
  // CANCELLED that follows it still says in which state the gang ran).
  for (const auto& entry : history) batch.AppendHistory(job->job().id(), entry);
  batch.PutJob(job->rec);
  Status s = store_->Commit(&batch);
  if (s.ok()) return;
  if (loading_) {
    if (load_status_.ok()) {
      load_status_ = s.WithContext("cannot record the recovery of job " + job->job().id());
    }
    return;
  }
  // What the coordinator does next would no longer match what a restart would read.
  MLCD_LOG(ERROR) << "cannot persist job " << job->job().id() << ": " << s.ToString()
                  << "; stopping (fail-stop: a restart resumes from the last state written"
                  << (s.code() == StatusCode::kUnavailable
                          ? "; free space in " + store_->dir() + " first"
                          : std::string())
                  << ")";
  std::abort();
}

void JobTable::BeginLoad() {
  loading_ = true;
  load_status_ = Status::Ok();
}

Status JobTable::EndLoad() {
  loading_ = false;
  return load_status_;
}

void JobTable::Touch(JobEntry* job) {
  ++job->version;
  changed_->notify_all();
}

void JobTable::SetDetail(JobEntry* job, const std::string& detail) {
  if (job->job().progress().detail() == detail) return;
  job->job().mutable_progress()->set_detail(detail);
  Touch(job);
}

v1::Job JobTable::PublicJob(const JobEntry& job) const {
  v1::Job out = job.job();
  if (!IsTerminal(job.state())) {
    (*out.mutable_phase_seconds())[StateName(job.state())] +=
        std::chrono::duration<double>(Clock::now() - job.state_entered).count();
  }
  out.set_attempts(static_cast<int32_t>(job.rec.job().attempts()));
  return out;
}

std::map<std::string, int> JobTable::CountByState() const {
  std::map<std::string, int> jobs;
  for (const auto& [id, job] : jobs_) ++jobs[StateName(job->state())];
  return jobs;
}

int JobTable::GangMembers() const {
  int gang = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->rec.has_attempt()) gang += job->rec.attempt().members_size();
  }
  return gang;
}

int JobTable::CountActive() const {
  int n = 0;
  for (const auto& [id, job] : jobs_) n += IsTerminal(job->state()) ? 0 : 1;
  return n;
}

}  // namespace mlcd::coordinator
