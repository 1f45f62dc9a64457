// How many ranks of a gang share this process's host, for checks that divide the host's free
// memory among them (worker/model/model_memory.h): ranks on one host must not each pass
// against the same free bytes.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "worker/dist/collectives.h"

namespace mlcd::worker {

// This host's identity: a hash of its name and kernel boot id (two containers of one machine
// with the same name but separate kernels are separate hosts).
int64_t HostId();

// The ranks of `comm`'s gang on this rank's host, itself included: a collective (an
// all-gather of HostId()), every rank calls it. 1 at world size 1.
StatusOr<int> RanksOnThisHost(Collectives* comm);

}  // namespace mlcd::worker
