// The owner marker of a checkpoint root: a root holds the checkpoints of one job only, so no
// job replaces or prunes a checkpoint another job wrote (docs/hardening.md, "Checkpoints").
//
//   <root>/OWNER   the id of the job the root belongs to, one line
//
// Rank 0 of a training gang claims the root before it writes or prunes anything there
// (ClaimCheckpointRoot, worker/train/checkpoint.h): the marker is written to a temporary file
// and linked into place (ConfinedDir::CreateFileExclusively), so of two jobs racing for one
// root exactly one wins and no reader sees a partial marker. A claimed root stays claimed:
// nothing rewrites or removes the marker. A root another job claimed is refused with
// FAILED_PRECONDITION before anything in it is touched; the coordinator refuses such a root
// at submit already (ReadCheckpointOwner).
#pragma once

#include <string>

#include "common/confined_file.h"
#include "common/status.h"

namespace mlcd {

inline constexpr const char* kCheckpointOwnerFile = "OWNER";

// The job that claimed the opened root: "" when it holds no marker. FAILED_PRECONDITION when
// OWNER is not a marker (a link, a directory, longer than kMaxCheckpointOwnerBytes).
StatusOr<std::string> ReadCheckpointOwner(const ConfinedDir& root);

// Claims the opened root for `job_id`: OK when the marker is new or names `job_id` already;
// FAILED_PRECONDITION naming the root and its owner otherwise. `job_id` empty (a run by hand,
// which no coordinator tracks): claims nothing, and a root some job claimed is refused the same.
Status ClaimCheckpointRoot(const ConfinedDir& root, const std::string& job_id);

}  // namespace mlcd
