// Acting for another identity (docs/security.md, "Label-set ownership"): a service that calls
// another service for a user (clusterd writing a user's label set, the coordinator's phases
// running for a job) names that user in the call, so the callee decides as if the user had
// called: the service never lends its own rights (no confused deputy).
//
// The name travels as gRPC metadata `mlcd-acting-for: ROLE IDENTITY`, e.g.
// "submitter token:alice" or "submitter job:3f2a9c". A callee honours it ONLY when the peer is
// a service (role `service`: a client certificate and no token, common/security.h); from any
// other caller the header is refused with PERMISSION_DENIED. Without the header a call acts
// for its caller.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "common/access_policy.h"
#include "common/security.h"
#include "common/status.h"

namespace mlcd {

// The metadata key (lower case, as gRPC requires).
inline constexpr char kActingForHeader[] = "mlcd-acting-for";
// Longest identity accepted in the header.
inline constexpr size_t kMaxActingIdentityChars = 200;
// The identity prefix of a job: the coordinator's phases act as "job:<id>" (role submitter).
inline constexpr std::string_view kJobIdentityPrefix = "job:";

struct ActingFor {
  // "token:NAME", "cert:CN" or "job:ID"; empty = the calling service acts as itself.
  std::string identity;
  Role role = Role::kNone;
  bool empty() const { return identity.empty(); }
};

// The identity the coordinator's phases use for job `job_id`.
ActingFor ActingForJob(const std::string& job_id);
// The principal a service forwards: `caller` itself.
ActingFor ActingForPrincipal(const Principal& caller);

// Client side: adds the header to `context` (nothing when `acting` is empty).
void AttachActingFor(const ActingFor& acting, grpc::ClientContext* context);

// Server side: the principal the call acts for. `caller` when the header is absent; the
// header's identity and role (with `via` set to the service) when the caller is a service or
// the server checks no one. PERMISSION_DENIED when another caller sends the header,
// INVALID_ARGUMENT for a malformed header, each saying what was wrong.
StatusOr<Principal> ActingPrincipal(const grpc::ServerContextBase& context,
                                    const Principal& caller);

}  // namespace mlcd
