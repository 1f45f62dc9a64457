// Where a round ends early (trainer_impl.h): the time budget fixes the round's step count
// from the first steps' rate (worker/train/step_budget.h), and a stop request ends the run at
// a checkpoint after the current step (worker/agent/stop_signal.h).
#include <algorithm>
#include <vector>

#include "common/format.h"
#include "common/log.h"
#include "worker/train/trainer_impl.h"

namespace mlcd::worker {

using nlohmann::json;

// Budgeted rounds have their own lengths: the round starts where the checkpoint's round
// started (same round) or ended (an earlier round); its count is the assignment's, if fixed.
void Trainer::Impl::StartBudgetedRound(const CheckpointMeta* meta) {
  if (meta != nullptr) {
    round_base =
        meta->round == options.round
            ? meta->global_step -
                  (static_cast<int64_t>(meta->epoch) * meta->steps_per_epoch + meta->step_in_epoch)
            : meta->global_step;
  }
  SetRoundSteps(options.round_steps > 0 ? options.round_steps : 0);
}

void Trainer::Impl::StartStage(const CheckpointMeta* meta) {
  if (meta == nullptr) {
    round_base = options.start_global_step;
  } else if (meta->round == options.round) {
    round_base = meta->global_step -
                 (static_cast<int64_t>(meta->epoch) * meta->steps_per_epoch + meta->step_in_epoch);
  } else {
    round_base = meta->global_step;
  }
  job_total_steps = round_base + MaxRoundSteps() * (spec.training().rounds() - options.round);
}

// With a budget: the round's step count (0 = not fixed yet: the provisional schedule over the
// round's epochs) and what follows from it: the schedule's length, the last epoch, the job's
// estimated total (later rounds assumed as long as this one).
void Trainer::Impl::SetRoundSteps(int64_t steps) {
  round_steps = steps;
  summary.round_steps = steps;
  const int64_t length = steps > 0 ? steps : MaxRoundSteps();
  lr.total_steps = length;
  job_total_steps = round_base + length * (spec.training().rounds() - options.round);
  if (steps <= 0) return;
  const int64_t epochs = (steps + steps_per_epoch - 1) / steps_per_epoch;
  schedule.end_epoch = static_cast<int>(std::min<int64_t>(schedule.end_epoch, epochs));
  if (schedule.first_epoch > schedule.end_epoch) schedule.first_epoch = schedule.end_epoch;
  if (schedule.first_epoch >= schedule.end_epoch) schedule.first_step = 0;
}

// While the round's count is open: rank 0's answer after this step (0 = keep timing) goes to
// every rank, so all stop timing at the same step with the same count.
Status Trainer::Impl::TimeStep() {
  std::vector<at::Tensor> answer{
      torch::full({1}, budget->StepDone(summary.steps_run),
                  torch::TensorOptions().dtype(torch::kLong).device(comm->device()))};
  MLCD_RETURN_IF_ERROR(comm->Broadcast(answer, 0).WithContext("timing the round's steps"));
  const int64_t count = answer[0].item<int64_t>();
  if (count > 0) FixRoundSteps(count);
  return Status::Ok();
}

void Trainer::Impl::FixRoundSteps(int64_t steps) {
  SetRoundSteps(steps);
  const double per_step = budget->seconds_per_step();
  const double budget_seconds = spec.training().time_budget_minutes() * 60;
  MLCD_LOG(INFO) << "time budget " << Fixed(budget_seconds, 0) << " s: "
                 << (per_step > 0 ? Fixed(per_step, 3) + " s per step over the first " +
                                        std::to_string(summary.steps_run) + " steps; "
                                  : "")
                 << "round " << options.round << " trains " << round_steps << " steps ("
                 << schedule.end_epoch << " epochs of up to " << steps_per_epoch
                 << " steps); the learning-rate schedule ends at the last";
  Emit(json{{"event", "budget"},
            {"round", options.round},
            {"round_steps", round_steps},
            {"round_epochs", schedule.end_epoch},
            {"steps_per_epoch", steps_per_epoch},
            {"steps_per_second", per_step > 0 ? 1.0 / per_step : 0.0},
            {"timed_steps", summary.steps_run},
            {"budget_seconds", budget_seconds},
            {"job_total_steps", job_total_steps}});
}

Status Trainer::Impl::StopAfter(const StepPosition& pos, int64_t done, bool checkpointed) {
  const bool asked_here = options.stop_requested->load();
  MLCD_LOG(WARNING) << "stopping after global step " << summary.global_step << " ("
                    << (asked_here ? "stop requested" : "a peer of the gang is stopping")
                    << "): " << (checkpointed || checkpoint_root.empty() ? "" : "checkpoint, ")
                    << "then exit";
  if (!checkpointed && !checkpoint_root.empty())
    MLCD_RETURN_IF_ERROR(Checkpoint(pos, done, /*round_end=*/false).status());
  summary.stopped = true;
  Emit(json{{"event", "stopped"},
            {"round", pos.round},
            {"epoch", pos.epoch},
            {"step_in_epoch", done},
            {"global_step", summary.global_step},
            {"checkpoint", checkpoint_root.empty() ? "" : summary.last_checkpoint},
            {"steps", summary.steps_run},
            {"reason", asked_here ? "stop requested" : "a peer of the gang is stopping"}});
  return Status::Ok();
}

}  // namespace mlcd::worker
