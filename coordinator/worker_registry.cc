#include "coordinator/worker_registry.h"

#include <algorithm>

#include "common/clock.h"
#include "common/log.h"

namespace mlcd::coordinator {

Status WorkerRegistry::Load(Clock::time_point now) {
  const int64_t now_ms = NowUnixMs();
  std::vector<v1::WorkerRecord> workers;
  MLCD_RETURN_IF_ERROR(store_->LoadWorkers(&workers));
  for (auto& record : workers) {
    auto entry = std::make_unique<WorkerEntry>();
    entry->record = std::move(record);
    // Unknown since the restart: give it the idle timeout to show up.
    entry->last_seen = now;
    entry->last_seen_unix_ms = now_ms;
    workers_[entry->record.worker_id()] = std::move(entry);
  }
  return Status::Ok();
}

WorkerEntry* WorkerRegistry::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

bool WorkerRegistry::Alive(const WorkerEntry& worker, Clock::time_point now) const {
  if (worker.state == v1::WORKER_STATE_LOST) return false;
  return worker.polls_waiting > 0 || now - worker.last_seen < options_.idle_worker_timeout;
}

std::chrono::milliseconds WorkerRegistry::Silent(const WorkerEntry& worker,
                                                 Clock::time_point now) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - worker.last_seen);
}

void WorkerRegistry::Release(WorkerEntry* worker) {
  worker->state = v1::WORKER_STATE_IDLE;
  worker->job_id.clear();
  worker->assignment_id.clear();
  worker->rank = -1;
  worker->pending.reset();
  worker->delivered = false;
  worker->progress.Clear();
}

void WorkerRegistry::Seen(WorkerEntry* worker, Clock::time_point now) {
  worker->last_seen = now;
  worker->last_seen_unix_ms = NowUnixMs();
}

StatusOr<WorkerEntry*> WorkerRegistry::Register(const v1::RegisterWorkerRequest& request,
                                                const std::string& identity,
                                                Clock::time_point now) {
  WorkerEntry* worker = Find(request.name());
  v1::WorkerRecord record;
  if (worker) record = worker->record;
  record.set_worker_id(request.name());
  *record.mutable_registration() = request;
  record.set_registered_unix_ms(NowUnixMs());
  record.set_identity(identity);
  // Written first: when the write fails (a full disk), nothing changed in memory either.
  StoreBatch batch;
  batch.PutWorker(record);
  MLCD_RETURN_IF_ERROR(store_->Commit(&batch));
  if (worker) {
    Release(worker);
  } else {
    auto entry = std::make_unique<WorkerEntry>();
    worker = entry.get();
    workers_[request.name()] = std::move(entry);
  }
  worker->record = std::move(record);
  worker->state = v1::WORKER_STATE_IDLE;
  Seen(worker, now);
  worker->offered_port = 0;  // set by its polls
  return worker;
}

Status WorkerRegistry::Remove(const std::string& id) {
  StoreBatch batch;
  batch.DeleteWorker(id);
  MLCD_RETURN_IF_ERROR(store_->Commit(&batch));
  workers_.erase(id);
  return Status::Ok();
}

Status WorkerRegistry::SetCordoned(WorkerEntry* worker, bool cordoned) {
  if (worker->record.cordoned() == cordoned) return Status::Ok();
  v1::WorkerRecord record = worker->record;
  record.set_cordoned(cordoned);
  StoreBatch batch;
  batch.PutWorker(record);
  MLCD_RETURN_IF_ERROR(store_->Commit(&batch));
  worker->record = std::move(record);
  return Status::Ok();
}

bool WorkerRegistry::CheckLiveness(Clock::time_point now) {
  bool changed = false;
  for (auto it = workers_.begin(); it != workers_.end();) {
    WorkerEntry* w = it->second.get();
    const auto silent = now - w->last_seen;
    if (w->polls_waiting > 0) {
      ++it;
      continue;
    }
    if ((w->state == v1::WORKER_STATE_IDLE || w->state == v1::WORKER_STATE_DRAINING) &&
        silent > options_.idle_worker_timeout) {
      MLCD_LOG(WARNING) << "worker " << it->first << " silent for "
                        << std::chrono::duration_cast<std::chrono::seconds>(silent).count()
                        << " s: lost";
      Release(w);
      w->state = v1::WORKER_STATE_LOST;
      changed = true;
    }
    if (w->state == v1::WORKER_STATE_LOST &&
        silent > std::max<Clock::duration>(options_.lost_worker_expiry, options_.name_lease)) {
      StoreBatch batch;
      batch.DeleteWorker(it->first);
      Status s = store_->Commit(&batch);
      if (!s.ok()) {
        MLCD_LOG(ERROR) << "cannot forget worker " << it->first << ": " << s.ToString();
      }
      it = workers_.erase(it);
      changed = true;
      continue;
    }
    ++it;
  }
  return changed;
}

void WorkerRegistry::Count(v1::AssignmentKind kind, Clock::time_point now, int* alive,
                           int* capable) const {
  *alive = 0;
  *capable = 0;
  for (const auto& [id, worker] : workers_) {
    if (!Alive(*worker, now)) continue;
    ++*alive;
    if (worker->Supports(kind)) ++*capable;
  }
}

std::vector<WorkerEntry*> WorkerRegistry::ReadyIdle(Clock::time_point now) {
  std::vector<WorkerEntry*> idle;
  for (auto& [id, w] : workers_) {
    // A worker is ready once it polls with a rendezvous port (it may become rank 0).
    const bool has_port = w->offered_port > 0 || w->record.registration().rendezvous_port() > 0;
    if (w->state == v1::WORKER_STATE_IDLE && !w->pending && has_port && !w->record.cordoned() &&
        Alive(*w, now))
      idle.push_back(w.get());
  }
  // Workers waiting in a poll first: they get the assignment at once.
  std::stable_sort(idle.begin(), idle.end(), [](WorkerEntry* a, WorkerEntry* b) {
    return a->polls_waiting > b->polls_waiting;
  });
  return idle;
}

void WorkerRegistry::List(v1::ListWorkersResponse* response) const {
  for (const auto& [id, worker] : workers_) {
    auto* info = response->add_workers();
    info->set_worker_id(id);
    *info->mutable_registration() = worker->record.registration();
    info->set_state(worker->state);
    info->set_job_id(worker->job_id);
    info->set_assignment_id(worker->assignment_id);
    info->set_rank(worker->rank);
    info->set_last_seen_unix_ms(worker->last_seen_unix_ms);
    *info->mutable_progress() = worker->progress;
    info->set_registered_unix_ms(worker->record.registered_unix_ms());
    info->set_cordoned(worker->record.cordoned());
  }
}

std::map<std::string, int> WorkerRegistry::CountByState() const {
  std::map<std::string, int> workers;
  for (const auto& [id, worker] : workers_) ++workers[WorkerStateName(worker->state)];
  return workers;
}

}  // namespace mlcd::coordinator
