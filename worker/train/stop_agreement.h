// Agreeing on the step a gang stops at (TrainerOptions::stop_requested; docs/worker.md,
// "Stopping"). A SIGTERM reaches one rank; every rank must stop after the same step so the
// checkpoint (a collective) is written by all of them there.
#pragma once

#include <atomic>

#include "common/status.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker {

// True when `local` is set on any rank: a max-allreduce of one float over `comm` (no
// collective at world size 1). Every rank must call it after the same step.
StatusOr<bool> AgreeToStop(const std::atomic<bool>& local, Collectives* comm);

}  // namespace mlcd::worker
