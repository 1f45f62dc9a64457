// The label store's side of write capabilities (clients/write_capability.h): the delegation
// key an OPEN set's owner mints capabilities with, and the check of a capability a
// WriteLabels call presents.
//
// Both derive from the database's secret (LabelStorage::capability_secret), so nothing is
// kept per grant and capabilities survive a restart of the store:
//   delegation key = HMAC-SHA256(secret, "mlcd-delegate|<set name>|<incarnation>")
// A capability verifies for one set and incarnation only: once the set is deleted (and
// perhaps made again) its capabilities grant nothing, and once it is sealed no write does.
// Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace mlcd::labelstore {

class WriteGrants {
 public:
  explicit WriteGrants(std::string secret) : secret_(std::move(secret)) {}

  // The key the owner of set `name`, incarnation `incarnation`, mints capabilities with.
  std::string DelegationKey(const std::string& name, uint64_t incarnation) const;

  // OK when `capability` verifies for set `name`, incarnation `incarnation`, and has not
  // expired; PERMISSION_DENIED naming the set and the holder otherwise.
  Status Check(const std::string& capability, const std::string& name, uint64_t incarnation) const;

 private:
  const std::string secret_;
};

}  // namespace mlcd::labelstore
