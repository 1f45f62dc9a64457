#include "coordinator/progress_tracker.h"

#include <algorithm>

#include "common/clock.h"
#include "common/format.h"
#include "common/limits.h"
#include "common/log.h"
#include "coordinator/checkpoint_dirs.h"

namespace mlcd::coordinator {
namespace {

// Epochs of a round: epochs_per_round, or the epochs its time budget's step count spans.
int RoundEpochs(const JobEntry& job, int round) {
  if (round >= 0 && round < job.job().rounds_size() && job.job().rounds(round).round_epochs() > 0)
    return job.job().rounds(round).round_epochs();
  return job.spec().training().epochs_per_round();
}

}  // namespace

void ProgressTracker::OnRankZeroProgress(JobEntry* job, const v1::WorkerProgress& progress,
                                         Clock::time_point now) {
  UpdateProgress(job, progress, now);
  MaybeRecordRoundSteps(job, progress);
  MaybeCommitCheckpoint(job, progress);
}

void ProgressTracker::MaybeRecordRoundSteps(JobEntry* job, const v1::WorkerProgress& progress) {
  if (!job->rec.has_attempt() || job->rec.attempt().kind() != v1::ASSIGNMENT_KIND_TRAIN) return;
  if (progress.round_steps() <= 0 || progress.steps_per_epoch() <= 0) return;
  const int r = job->rec.attempt().round();
  if (r >= job->job().rounds_size()) return;
  v1::RoundStatus* round = job->job().mutable_rounds(r);
  if (round->round_steps() > 0) return;  // fixed by the first measurement
  const int64_t epochs =
      (progress.round_steps() + progress.steps_per_epoch() - 1) / progress.steps_per_epoch();
  round->set_round_steps(progress.round_steps());
  job->job().mutable_progress()->set_epochs_per_round(static_cast<int32_t>(epochs));
  round->set_round_epochs(
      static_cast<int32_t>(std::min<int64_t>(epochs, job->spec().training().epochs_per_round())));
  std::string rate;
  if (progress.measured_steps_per_second() > 0)
    rate = " at " + Fixed(progress.measured_steps_per_second(), 2) + " steps/s";
  auto entry =
      jobs_->NewHistory(job, "round_steps_fixed",
                        "time budget of " + Fixed(job->spec().training().time_budget_minutes(), 1) +
                            " min: " + RoundText(r, job->spec().training().rounds()) + " trains " +
                            std::to_string(progress.round_steps()) + " steps (" +
                            std::to_string(epochs) + " epochs, measured" + rate + ")");
  entry.set_round(r);
  entry.set_global_step(progress.round_steps());
  jobs_->Persist(job, {entry});
}

void ProgressTracker::UpdateStepRate(JobEntry* job, int64_t step, Clock::time_point now) {
  if (job->rate_step < 0 || step < job->rate_step) {
    job->rate_step = step;
    job->rate_time = now;
  } else if (step > job->rate_step) {
    const double dt = std::chrono::duration<double>(now - job->rate_time).count();
    if (dt > 0.2) {
      const double rate = (step - job->rate_step) / dt;
      job->steps_per_second =
          job->steps_per_second > 0 ? 0.7 * job->steps_per_second + 0.3 * rate : rate;
      job->rate_step = step;
      job->rate_time = now;
    }
  }
}

void ProgressTracker::UpdateProgress(JobEntry* job, const v1::WorkerProgress& progress,
                                     Clock::time_point now) {
  if (!job->rec.has_attempt()) return;
  auto* p = job->job().mutable_progress();
  const auto kind = job->rec.attempt().kind();
  if (kind == v1::ASSIGNMENT_KIND_TRAIN) {
    // Nothing to show until the child has taken a step of this attempt.
    if (progress.total_steps() <= job->rec.attempt().start_global_step()) return;
    p->set_round(progress.round());
    p->set_epoch(progress.epoch());
    p->set_step(progress.step());
    if (progress.steps_per_epoch() > 0) p->set_steps_per_epoch(progress.steps_per_epoch());
    p->set_total_steps(std::max(p->total_steps(), progress.total_steps()));
    p->set_loss(progress.loss());
    p->set_samples_per_second(progress.samples_per_second());
    p->set_mean_positive_cosine(progress.mean_positive_cosine());
    p->set_mean_negative_cosine(progress.mean_negative_cosine());
    if (progress.job_total_steps() > 0) p->set_job_total_steps(progress.job_total_steps());
    const int64_t step = progress.total_steps();
    if (job->job().first_step_unix_ms() == 0 && step > job->rec.attempt().start_global_step()) {
      job->job().set_first_step_unix_ms(NowUnixMs());
    }
    UpdateStepRate(job, step, now);
    if (job->steps_per_second > 0 && p->job_total_steps() > 0) {
      p->set_eta_seconds(std::max<int64_t>(0, p->job_total_steps() - p->total_steps()) /
                         job->steps_per_second);
    }
    p->set_detail("training round " + std::to_string(progress.round() + 1) + "/" +
                  std::to_string(job->spec().training().rounds()) + ", epoch " +
                  std::to_string(progress.epoch() + 1) + "/" +
                  std::to_string(RoundEpochs(*job, progress.round())) + " on " +
                  std::to_string(job->rec.attempt().world_size()) + " workers");
  } else if (progress.steps_per_epoch() > 0) {
    p->set_detail(
        std::string(kind == v1::ASSIGNMENT_KIND_EXTRACT   ? "extracting features"
                    : kind == v1::ASSIGNMENT_KIND_CLUSTER ? "clustering on the gang"
                    : kind == v1::ASSIGNMENT_KIND_ASSIGN_LABELS ? "assigning labels on the gang"
                                                                : "evaluating") +
        (progress.activity().empty() ? "" : " (" + progress.activity() + ")") + ": " +
        std::to_string(progress.step()) + "/" + std::to_string(progress.steps_per_epoch()));
  }
  jobs_->Touch(job);
}

void ProgressTracker::MaybeCommitCheckpoint(JobEntry* job, const v1::WorkerProgress& progress) {
  if (!job->rec.has_attempt() || job->rec.attempt().kind() != v1::ASSIGNMENT_KIND_TRAIN) return;
  if (progress.checkpoint().empty()) return;
  const std::string dir = JobCheckpointDir(data_dir_, job->job().id(), job->spec());
  if (!CheckpointLiesIn(progress.checkpoint(), dir)) {
    RefuseCheckpoint(job, progress.checkpoint(), dir);
    return;
  }
  const auto& attempt = job->rec.attempt();
  const int r = progress.checkpoint_round();
  if (r != attempt.round() || r >= job->job().rounds_size()) return;
  v1::RoundStatus* round = job->job().mutable_rounds(r);
  const int64_t step = progress.checkpoint_global_step();
  const bool complete = progress.checkpoint_epoch_complete();
  const bool newer =
      round->checkpoint().empty() || step > round->checkpoint_global_step() ||
      (step == round->checkpoint_global_step() && complete && !round->checkpoint_epoch_complete());
  if (!newer || progress.checkpoint_epoch() < attempt.first_epoch()) return;
  if (complete && progress.checkpoint_epoch() < round->epochs_committed()) {
    MLCD_LOG(ERROR) << "job " << job->job().id() << ": gang " << attempt.id() << " reported epoch "
                    << progress.checkpoint_epoch() << " of round " << r
                    << " again, though it was committed; keeping the first commit";
    return;
  }
  round->set_checkpoint(progress.checkpoint());
  round->set_checkpoint_global_step(step);
  round->set_checkpoint_epoch(progress.checkpoint_epoch());
  round->set_checkpoint_epoch_complete(complete);
  job->job().set_checkpoint(progress.checkpoint());
  auto* p = job->job().mutable_progress();
  p->set_total_steps(std::max(p->total_steps(), step));
  std::vector<v1::JobHistoryEntry> history;
  if (complete) {
    // The end of epoch e also completes every earlier epoch of this gang whose own
    // checkpoint event was not seen (several epochs between two heartbeats, or while the
    // coordinator was down): each is committed once, here.
    const std::string round_text = RoundText(r, job->spec().training().rounds());
    for (int e = round->epochs_committed(); e <= progress.checkpoint_epoch(); ++e) {
      const bool implied = e < progress.checkpoint_epoch();
      auto entry =
          jobs_->NewHistory(job, "epoch_committed",
                            "epoch " + std::to_string(e + 1) + " of " + round_text + " committed" +
                                (implied ? " (completed by the checkpoint of epoch " +
                                               std::to_string(progress.checkpoint_epoch() + 1) + ")"
                                         : " at global step " + std::to_string(step)));
      entry.set_round(r);
      entry.set_epoch(e);
      entry.set_global_step(implied ? 0 : step);
      entry.set_checkpoint(implied ? "" : progress.checkpoint());
      history.push_back(entry);
      metrics_->EpochCommitted();
    }
    round->set_epochs_committed(progress.checkpoint_epoch() + 1);
  } else {
    auto entry = jobs_->NewHistory(
        job, "checkpoint_committed",
        "mid-epoch checkpoint at global step " + std::to_string(step) + " committed");
    entry.set_round(r);
    entry.set_epoch(progress.checkpoint_epoch());
    entry.set_global_step(step);
    entry.set_checkpoint(progress.checkpoint());
    history.push_back(entry);
  }
  jobs_->Persist(job, std::move(history));
  jobs_->Touch(job);
}

void ProgressTracker::RefuseCheckpoint(JobEntry* job, const std::string& reported,
                                       const std::string& dir) {
  if (reported == job->refused_checkpoint) return;  // every heartbeat repeats it
  job->refused_checkpoint = reported;
  const std::string shown = reported.size() > kMaxPathLength
                                ? reported.substr(0, kMaxPathLength) + "... (" +
                                      std::to_string(reported.size()) + " bytes)"
                                : reported;
  const std::string message =
      "rank 0 of gang " + job->rec.attempt().id() + " reported checkpoint '" + shown +
      "', which is not inside the job's checkpoint folder " + dir + "/; not committed";
  MLCD_LOG(WARNING) << "job " << job->job().id() << ": " << message;
  if (job->checkpoint_refusals >= kMaxCheckpointRefusalsRecorded) return;
  ++job->checkpoint_refusals;
  auto entry = jobs_->NewHistory(job, "checkpoint_refused", message);
  entry.set_round(job->rec.attempt().round());
  jobs_->Persist(job, {entry});
}

}  // namespace mlcd::coordinator
