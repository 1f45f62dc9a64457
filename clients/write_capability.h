// Label-write capabilities: a credential that lets its holder write the rows of exactly one
// OPEN label set, one incarnation of it, until it expires -- whoever the holder's identity
// is (docs/security.md, "Write capabilities").
//
// The label store keeps one secret key. For an OPEN set it hands the set's owner a
// delegation key (LabelStore.DelegateWrites), derived from its secret, the set's name and
// its incarnation (a set deleted and made again under the same name is a new incarnation).
// The owner mints capabilities from the delegation key without asking the store again --
// the coordinator mints one per rank of a labelling gang, bound to the job, round, phase
// and rank -- and the holder presents it on WriteLabels in the kWriteCapabilityHeader
// metadata. The store recomputes the delegation key and the MAC: a capability verifies only
// for the set and incarnation it was minted for, only before it expires, and it cannot be
// widened (another set, a later expiry) without the key.
//
// Text form (printable ASCII, a gRPC metadata value):
//   mlcdcap1|<incarnation>|<expires unix seconds>|<holder>|<HMAC-SHA256, 64 hex>
// over "mlcdcap1|<set name>|<incarnation>|<expires>|<holder>" with the delegation key.
// The holder is a description for messages and logs ([A-Za-z0-9._:/@-]{1,200}); it grants
// nothing by itself.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace mlcd::labelstore {

// The metadata key a WriteLabels call carries its capability in.
inline constexpr char kWriteCapabilityHeader[] = "mlcd-write-capability";

// What a capability says, once its MAC checked out.
struct WriteCapability {
  uint64_t incarnation = 0;
  int64_t expires_unix_seconds = 0;
  std::string holder;
};

// The capability text for `holder` to write set `name`, incarnation `incarnation`, until
// `expires_unix_seconds`, MACed with `delegation_key`. INVALID_ARGUMENT for a holder outside
// the allowed characters or an empty key.
StatusOr<std::string> MintWriteCapability(const std::string& delegation_key,
                                          const std::string& name, uint64_t incarnation,
                                          int64_t expires_unix_seconds, const std::string& holder);

// The delegation key of set `name` for an incarnation (the store derives it from its secret).
using DelegationKeyFn = std::function<std::string(uint64_t incarnation)>;

// Checks `text` against set `name` (the MAC, in constant time, under the key of the
// incarnation the capability names) and returns what it grants. PERMISSION_DENIED, naming
// the set and (when it parses) the holder, for a malformed capability, a wrong MAC (another
// set, a forged or altered one) or one expired before `now_unix_seconds`. The caller still
// compares the incarnation with the set's.
StatusOr<WriteCapability> VerifyWriteCapability(const DelegationKeyFn& delegation_key,
                                                const std::string& name, const std::string& text,
                                                int64_t now_unix_seconds);

}  // namespace mlcd::labelstore
