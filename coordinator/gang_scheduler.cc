#include "coordinator/gang_scheduler.h"

#include <algorithm>

#include "clients/labelstore_limits.h"
#include "clients/write_capability.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "coordinator/checkpoint_dirs.h"

namespace mlcd::coordinator {

void PublishGauges(const JobTable& jobs, const WorkerRegistry& workers,
                   CoordinatorMetrics* metrics) {
  metrics->SetJobs(jobs.CountByState());
  metrics->SetWorkers(workers.CountByState());
  metrics->SetGangSize(jobs.GangMembers());
}

std::vector<std::string> GangOutputs(const v1::GangAttempt& attempt) {
  std::vector<std::string> outputs;
  for (const auto& m : attempt.members()) {
    for (const auto& p : m.output_paths()) outputs.push_back(p);
  }
  std::sort(outputs.begin(), outputs.end());
  outputs.erase(std::unique(outputs.begin(), outputs.end()), outputs.end());
  return outputs;
}

void GangScheduler::Reattach(JobEntry* job, Clock::time_point now) {
  const auto& attempt = job->rec.attempt();
  for (const auto& member : attempt.members()) {
    if (member.reported()) continue;
    job->member_last_heard[member.assignment_id()] = now;
    assignment_jobs_[member.assignment_id()] = job->job().id();
    WorkerEntry* worker = workers_->Find(member.worker_id());
    if (worker) {
      worker->state = v1::WORKER_STATE_BUSY;
      worker->delivered = true;
      worker->job_id = job->job().id();
      worker->assignment_id = member.assignment_id();
      worker->rank = member.rank();
    }
  }
}

JobEntry* GangScheduler::JobOf(const std::string& aid) {
  auto it = assignment_jobs_.find(aid);
  return it == assignment_jobs_.end() ? nullptr : jobs_->Find(it->second);
}

void GangScheduler::Forget(JobEntry* job, const std::string& aid) {
  assignment_jobs_.erase(aid);
  job->member_last_heard.erase(aid);
}

const std::string* GangScheduler::AbortReason(const std::string& aid) const {
  auto it = abort_reasons_.find(aid);
  return it == abort_reasons_.end() ? nullptr : &it->second;
}

// ---------------------------------------------------------------------------------------
// Starting gangs.

v1::GangAttempt GangScheduler::NewAttempt(JobEntry* job, v1::AssignmentKind kind,
                                          const std::vector<WorkerEntry*>& workers) {
  const auto& spec = job->spec();
  const int n = job->job().attempts() + 1;
  job->job().set_attempts(n);
  v1::GangAttempt attempt;
  attempt.set_id(job->job().id() + "-a" + std::to_string(n));
  attempt.set_kind(kind);
  attempt.set_world_size(static_cast<int32_t>(workers.size()));
  attempt.set_started_unix_ms(NowUnixMs());
  const int r = job->job().rounds_size() - 1;
  attempt.set_round(r);
  v1::RoundStatus* round = job->round();
  const v1::RoundStatus* previous = r > 0 ? &job->job().rounds(r - 1) : nullptr;
  const std::string job_dir = JobDir(options_.data_dir, job->job().id());
  if (kind == v1::ASSIGNMENT_KIND_TRAIN) {
    attempt.set_first_epoch(round->epochs_committed());
    attempt.set_end_epoch(spec.training().epochs_per_round());
    if (!round->checkpoint().empty()) {
      attempt.set_resume_checkpoint(round->checkpoint());
      attempt.set_start_global_step(round->checkpoint_global_step());
    } else if (previous) {
      // An MCL stage starts from scratch unless mcl.stage_init says "previous"; its global
      // steps go on after the previous stage's either way.
      if (!IsMcl(spec) || spec.mcl().stage_init() == "previous")
        attempt.set_resume_checkpoint(previous->checkpoint());
      attempt.set_start_global_step(previous->checkpoint_global_step());
    }
  } else if (kind == v1::ASSIGNMENT_KIND_EXTRACT) {
    // MLCD extracts the previous round's model for this round's clustering; MCL extracts the
    // stage just trained, whose clustering its next stage trains on.
    if (IsMcl(spec)) {
      attempt.set_resume_checkpoint(round->checkpoint());
    } else if (previous) {
      attempt.set_resume_checkpoint(previous->checkpoint());
    }
    attempt.set_output_dir(job_dir + "/r" + std::to_string(r) + "/features-a" + std::to_string(n));
  } else if (kind == v1::ASSIGNMENT_KIND_EVALUATE) {
    attempt.set_resume_checkpoint(round->checkpoint());
    attempt.set_output_dir(job_dir + "/eval-a" + std::to_string(n));
  } else {
    // CLUSTER / ASSIGN_LABELS: the round's folder, which holds the planned centroids path.
    attempt.set_output_dir(job_dir + "/r" + std::to_string(r));
  }
  WorkerEntry* rank0 = workers[0];
  const int port = rank0->offered_port > 0 ? rank0->offered_port
                                           : rank0->record.registration().rendezvous_port();
  attempt.set_rendezvous_address(JoinHostPort(rank0->record.registration().host(), port));
  for (size_t i = 0; i < workers.size(); ++i) {
    auto* m = attempt.add_members();
    m->set_worker_id(workers[i]->record.worker_id());
    m->set_worker_name(workers[i]->record.registration().name());
    m->set_host(workers[i]->record.registration().host());
    m->set_rank(static_cast<int32_t>(i));
    m->set_assignment_id(attempt.id() + "-r" + std::to_string(i));
  }
  return attempt;
}

v1::Assignment GangScheduler::NewAssignment(const JobEntry& job, const v1::GangAttempt& attempt,
                                            const v1::GangMember& member) const {
  const auto& spec = job.spec();
  const v1::RoundStatus& round = job.job().rounds(attempt.round());
  const std::string checkpoint_dir = JobCheckpointDir(options_.data_dir, job.job().id(), spec);
  v1::Assignment a;
  a.set_id(member.assignment_id());
  a.set_kind(attempt.kind());
  a.set_job_id(job.job().id());
  a.set_rank(member.rank());
  a.set_world_size(attempt.world_size());
  int ranks_on_host = 0;
  for (const v1::GangMember& other : attempt.members())
    ranks_on_host += other.host() == member.host() ? 1 : 0;
  a.set_ranks_on_host(std::max(1, ranks_on_host));
  a.set_rendezvous_address(attempt.rendezvous_address());
  *a.mutable_spec() = spec;
  a.set_round(attempt.round());
  a.set_first_epoch(attempt.first_epoch());
  a.set_end_epoch(attempt.end_epoch());
  a.set_label_set(round.label_set());
  a.set_centroids_path(round.centroids_path());
  a.set_labelstore_address(options_.labelstore_address);
  a.set_resume_checkpoint(attempt.resume_checkpoint());
  // Each MCL stage checkpoints into a folder of its own, so that pruning a stage's old
  // checkpoints never removes an earlier stage's encoder (the job's model is all of them).
  a.set_checkpoint_dir(IsMcl(spec) ? StageCheckpointDir(checkpoint_dir, attempt.round())
                                   : checkpoint_dir);
  if (IsMcl(spec) && attempt.kind() == v1::ASSIGNMENT_KIND_TRAIN) {
    for (int j = 0; j < attempt.round(); ++j)
      a.add_pseudo_label_sets(job.job().rounds(j).label_set());
  }
  // EXTRACT embeds the stage just trained alone: the paper clusters each stage's own.
  if (IsMcl(spec) && attempt.kind() == v1::ASSIGNMENT_KIND_EVALUATE) {
    for (int j = 0; j <= attempt.round(); ++j)
      a.add_stage_checkpoints(job.job().rounds(j).checkpoint());
  }
  a.set_output_dir(attempt.output_dir());
  a.set_attempt_id(attempt.id());
  a.set_heartbeat_interval_ms(static_cast<int32_t>(options_.heartbeat_interval.count()));
  a.set_start_global_step(attempt.start_global_step());
  if (attempt.kind() == v1::ASSIGNMENT_KIND_TRAIN)
    a.set_tensorboard_dir(job.job().tensorboard_dir());
  if (attempt.kind() == v1::ASSIGNMENT_KIND_TRAIN) a.set_round_steps(round.round_steps());
  if (attempt.kind() == v1::ASSIGNMENT_KIND_EVALUATE)
    a.set_baseline_cache_dir(options_.data_dir + "/baselines");
  if (attempt.kind() == v1::ASSIGNMENT_KIND_CLUSTER ||
      attempt.kind() == v1::ASSIGNMENT_KIND_ASSIGN_LABELS) {
    for (const auto& p : round.feature_paths()) a.add_feature_paths(p);
    for (const auto& p : round.feature_ids_paths()) a.add_feature_ids_paths(p);
    a.set_class_labels_path(round.class_labels_path());
    if (round.has_generated_features())
      *a.mutable_generated_features() = round.generated_features();
  }
  if (attempt.kind() == v1::ASSIGNMENT_KIND_ASSIGN_LABELS) {
    a.set_label_set(RoundLabelSet(job.job(), attempt.round()));
    a.set_label_write_capability(LabelWriteCapability(job, a));
  }
  return a;
}

std::string GangScheduler::LabelWriteCapability(const JobEntry& job, const v1::Assignment& a) {
  // KindFor starts no labelling gang without the delegation of this very set.
  if (!job.label_writes || job.label_writes->label_set != a.label_set()) return "";
  const std::string holder = "job:" + a.job_id() + "/r" + std::to_string(a.round()) +
                             "/assign_labels/rank" + std::to_string(a.rank());
  StatusOr<std::string> capability = labelstore::MintWriteCapability(
      job.label_writes->key, a.label_set(), job.label_writes->incarnation,
      NowUnixMs() / 1000 + labelstore::kLabelWriteCapabilitySeconds, holder);
  if (!capability.ok()) {
    MLCD_LOG(ERROR) << "job " << a.job_id() << ": no write capability for " << holder << ": "
                    << capability.status().ToString();
    return "";
  }
  return *capability;
}

void GangScheduler::Start(JobEntry* job, v1::AssignmentKind kind,
                          const std::vector<WorkerEntry*>& workers) {
  const v1::GangAttempt attempt = NewAttempt(job, kind, workers);
  *job->rec.mutable_attempt() = attempt;
  job->short_since.reset();
  auto* p = job->job().mutable_progress();
  p->set_gang_size(attempt.world_size());
  p->set_round(attempt.round());
  if (kind == v1::ASSIGNMENT_KIND_TRAIN) p->set_epoch(attempt.first_epoch());
  p->set_detail("starting " + KindName(kind) + " on " + std::to_string(workers.size()) +
                " workers");
  job->rate_step = -1;
  job->steps_per_second = 0;
  auto entry = jobs_->NewHistory(
      job, "gang_started",
      KindName(kind) + " gang " + attempt.id() + " of " + std::to_string(workers.size()) +
          " workers, rendezvous " + attempt.rendezvous_address() +
          (attempt.resume_checkpoint().empty() ? "" : ", resuming " + attempt.resume_checkpoint()));
  entry.set_assignment_kind(kind);
  entry.set_first_epoch(attempt.first_epoch());
  entry.set_end_epoch(attempt.end_epoch());
  entry.set_world_size(attempt.world_size());
  entry.set_global_step(attempt.start_global_step());
  entry.set_checkpoint(attempt.resume_checkpoint());
  jobs_->Persist(job, {entry});  // persisted before any worker hears of it

  const auto now = Clock::now();
  for (size_t i = 0; i < workers.size(); ++i) {
    const auto& m = attempt.members(static_cast<int>(i));
    WorkerEntry* w = workers[i];
    w->state = v1::WORKER_STATE_BUSY;
    w->job_id = job->job().id();
    w->assignment_id = m.assignment_id();
    w->rank = m.rank();
    w->pending = NewAssignment(*job, attempt, m);
    w->delivered = false;
    w->progress.Clear();
    job->member_last_heard[m.assignment_id()] = now;
    assignment_jobs_[m.assignment_id()] = job->job().id();
  }
  metrics_->GangStarted();
  MLCD_LOG(INFO) << "job " << job->job().id() << ": started " << KindName(kind) << " gang "
                 << attempt.id() << " (" << workers.size() << " workers, rendezvous "
                 << attempt.rendezvous_address() << ")";
  PublishGauges(*jobs_, *workers_, metrics_);
  jobs_->Touch(job);
  work_->notify_all();
}

int GangScheduler::WantedGangSize(JobEntry* job, int available, Clock::time_point now) {
  const auto kind = KindFor(*job);
  const int full = kind == v1::ASSIGNMENT_KIND_EVALUATE ? 1 : job->spec().training().world_size();
  if (available >= full) {
    job->short_since.reset();
    return full;
  }
  if (job->rec.phase_failures() == 0 || available == 0) return full;
  if (!job->short_since) job->short_since = now;
  const auto grace = std::chrono::seconds(job->spec().training().heartbeat_timeout_seconds());
  if (now - *job->short_since < grace) return full;
  for (int w = available; w >= 1; --w) {
    if (kind == v1::ASSIGNMENT_KIND_TRAIN &&
        (job->spec().training().batch_size() % w != 0 || w > job->spec().clustering().k())) {
      continue;
    }
    return w;
  }
  return full;
}

JobVerdicts GangScheduler::Schedule(Clock::time_point now) {
  JobVerdicts unrunnable;
  std::vector<JobEntry*> waiting;
  for (auto& [id, job] : jobs_->all()) {
    const auto kind = KindFor(*job);
    if (kind != v1::ASSIGNMENT_KIND_NONE && !job->rec.has_attempt() && !IsTerminal(job->state())) {
      waiting.push_back(job.get());
    }
  }
  std::sort(waiting.begin(), waiting.end(),
            [](JobEntry* a, JobEntry* b) { return a->rec.seq() < b->rec.seq(); });
  std::vector<WorkerEntry*> idle = workers_->ReadyIdle(now);
  int still_waiting = 0;
  // The first job that could run but waits for idle workers: the jobs behind it wait too
  // (FIFO, so a big gang is never starved by smaller ones).
  const JobEntry* first_in_line = nullptr;
  for (JobEntry* job : waiting) {
    const auto kind = KindFor(*job);
    std::vector<WorkerEntry*> capable;
    for (WorkerEntry* w : idle) {
      if (w->Supports(kind)) capable.push_back(w);
    }
    int alive = 0, alive_capable = 0;
    workers_->Count(kind, now, &alive, &alive_capable);
    if (alive > 0 && alive_capable == 0) {
      unrunnable.emplace_back(job, "no registered worker can " + KindName(kind) + " (" +
                                       std::to_string(alive) +
                                       " workers registered); the job cannot go on");
      continue;
    }
    const int want = WantedGangSize(job, static_cast<int>(capable.size()), now);
    if (want > alive_capable) {
      // Cannot start until more workers register: it must not hold back jobs that can run.
      jobs_->SetDetail(job, "needs " + std::to_string(want) + " workers that can " +
                                KindName(kind) + ", " + std::to_string(alive_capable) +
                                " registered (later jobs that fit run meanwhile)");
      ++still_waiting;
      continue;
    }
    if (first_in_line) {
      jobs_->SetDetail(job, "queued behind job " + first_in_line->job().id() +
                                ", which waits for idle workers first");
      ++still_waiting;
      continue;
    }
    if (static_cast<int>(capable.size()) >= want) {
      std::vector<WorkerEntry*> gang(capable.begin(), capable.begin() + want);
      for (WorkerEntry* w : gang) idle.erase(std::find(idle.begin(), idle.end(), w));
      Start(job, kind, gang);
      continue;
    }
    jobs_->SetDetail(job, "waiting for " + std::to_string(want) + " idle workers that can " +
                              KindName(kind) + " (" + std::to_string(capable.size()) + " idle, " +
                              std::to_string(alive) + " registered)");
    ++still_waiting;
    first_in_line = job;
  }
  metrics_->SetJobsWaitingForWorkers(still_waiting);
  return unrunnable;
}

// ---------------------------------------------------------------------------------------
// Liveness and aborts.

JobVerdicts GangScheduler::SilentMembers(Clock::time_point now) {
  JobVerdicts silent_gangs;
  for (auto& [id, job] : jobs_->all()) {
    if (!job->rec.has_attempt()) continue;
    const auto timeout = std::chrono::seconds(job->spec().training().heartbeat_timeout_seconds());
    for (const auto& m : job->rec.attempt().members()) {
      if (m.reported()) continue;
      auto heard = job->member_last_heard.find(m.assignment_id());
      if (heard == job->member_last_heard.end()) {
        job->member_last_heard[m.assignment_id()] = now;
        continue;
      }
      if (now - heard->second <= timeout) continue;
      const auto silent =
          std::chrono::duration_cast<std::chrono::seconds>(now - heard->second).count();
      if (WorkerEntry* w = workers_->Find(m.worker_id())) {
        if (w->assignment_id == m.assignment_id()) {
          workers_->Release(w);
          w->state = v1::WORKER_STATE_LOST;
        }
      }
      silent_gangs.emplace_back(
          job.get(), "worker " + m.worker_id() + " (rank " + std::to_string(m.rank()) +
                         ") sent no heartbeat for " + std::to_string(silent) +
                         " s (heartbeat_timeout_seconds " +
                         std::to_string(job->spec().training().heartbeat_timeout_seconds()) + ")");
      break;
    }
  }
  return silent_gangs;
}

v1::JobHistoryEntry GangScheduler::Detach(JobEntry* job, const std::string& reason,
                                          bool counts_as_restart) {
  const v1::GangAttempt attempt = job->rec.attempt();
  for (const auto& m : attempt.members()) {
    assignment_jobs_.erase(m.assignment_id());
    abort_reasons_[m.assignment_id()] = reason;
    abort_order_.push_back(m.assignment_id());
    if (abort_order_.size() > 4096) {
      abort_reasons_.erase(abort_order_.front());
      abort_order_.erase(abort_order_.begin());
    }
    WorkerEntry* w = workers_->Find(m.worker_id());
    if (!w || w->assignment_id != m.assignment_id()) continue;
    if (w->pending && !w->delivered) {
      workers_->Release(w);  // never started it
    } else if (w->state == v1::WORKER_STATE_BUSY) {
      w->state = v1::WORKER_STATE_DRAINING;  // told ABORT in its next heartbeat
    }
  }
  job->rec.clear_attempt();
  job->member_last_heard.clear();
  job->job().mutable_progress()->set_gang_size(0);
  auto entry = jobs_->NewHistory(job, "gang_aborted", reason);
  entry.set_attempt_id(attempt.id());
  entry.set_assignment_kind(attempt.kind());
  entry.set_round(attempt.round());
  if (counts_as_restart) {
    job->job().set_restarts(job->job().restarts() + 1);
    job->rec.set_phase_failures(job->rec.phase_failures() + 1);
    metrics_->GangRestarted();
  }
  job->job().set_message("gang " + attempt.id() + " aborted: " + reason);
  MLCD_LOG(WARNING) << "job " << job->job().id() << ": gang " << attempt.id()
                    << " aborted: " << reason;
  work_->notify_all();
  return entry;
}

}  // namespace mlcd::coordinator
