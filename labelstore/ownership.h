// Who may change which label set (docs/security.md, "Label-set ownership").
//
// Every set records its owner when it is created (LabelSetInfo.owner, kept in the set's
// RocksDB record and cached in memory): the identity the creating call acts for
// (common/acting_for.h: the caller, or the user or job a service names), and "job:<id>" for
// a job's sets (names "job/<id>/..."). Reads are open to every reader role, as before. Changes:
//   create       a name under "job/<id>" only when acting for job:<id> (the coordinator's
//                phases, through clusterd); any other name by anyone allowed to create
//   write, seal  the owner, or an admin -- except a job's sets, which only the job writes
//                and seals. Anyone else writes only with a write capability the owner
//                issued for the set (labelstore/write_grants.h): that is how a job's gang
//                ranks write its rows (clustering.engine gang); no role grants it
//   delete       the owner or an admin (so replace, which deletes first, is the same)
// A set created before owners were recorded (owner "") is changed by admins only. When the
// service checks no callers (no tokens file), nothing is refused.
//
// Refusals are PERMISSION_DENIED naming the set, its owner and the caller.
#pragma once

#include <string>

#include "common/security.h"
#include "common/status.h"

namespace mlcd::labelstore {

enum class SetChange { kWrite, kSeal, kDelete };

// The owner a new set `name` gets when created for `actor`.
std::string OwnerOfNewSet(const std::string& name, const Principal& actor);

// May `actor` create set `name`?
Status CheckCreate(const std::string& name, const Principal& actor);

// May `actor` make `change` to set `name`, owned by `owner`?
Status CheckChange(const std::string& name, const std::string& owner, const Principal& actor,
                   SetChange change);

}  // namespace mlcd::labelstore
