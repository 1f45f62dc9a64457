// Who may call what: the roles and the one table of every gRPC method's allowed roles
// (docs/security.md, "Roles"). The table is in access_policy.cc and nowhere else.
//
// Roles of bearer tokens (the tokens file, tokens.h):
//   viewer     get, list and watch jobs, label sets, labels and worker status
//   submitter  viewer, plus submit jobs and cancel its own, create label sets and write,
//              seal and delete its own, run clusterd
//   admin      everything: cancel anyone's job, change anyone's label set (a job's only to
//              delete it), list workers, worker API
//   worker     the coordinator's worker API (register, poll, heartbeat, report) and reading
//              labels: what a worker agent and its training children call
// A client certificate verified by the server's CA (mTLS) acts as role `service` -- unless
// its subject holds OU=mlcd-user (kUserCertUnit; a user's certificate, e.g. `mlcdctl local
// up`'s user.pem), which only lets its holder connect: its calls need a token. `service`: the
// worker API, label store writes and deletes, clusterd and reading. A service may act for
// another identity (common/acting_for.h); the label store then decides ownership as if that
// identity had called. A user-API method
// (user_api in the table) needs a token even from a client with a certificate.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace mlcd {

// The organizational unit (OU) that marks a user's client certificate: no service role.
inline constexpr char kUserCertUnit[] = "mlcd-user";

enum class Role : uint32_t {
  kNone = 0,
  kViewer = 1u << 0,
  kSubmitter = 1u << 1,
  kAdmin = 1u << 2,
  kWorker = 1u << 3,
  kService = 1u << 4,
};

// "viewer" | "submitter" | "admin" | "worker" (tokens file spellings; `service` is given by
// certificates only). INVALID_ARGUMENT naming the accepted spellings.
StatusOr<Role> ParseTokenRole(const std::string& name);
const char* RoleName(Role role);

struct MethodAccess {
  // Full gRPC method name, e.g. "/mlcd.v1.Coordinator/SubmitJob".
  std::string_view method;
  // Bit set of the Roles allowed.
  uint32_t roles = 0;
  // Needs a bearer token (a client certificate alone is not enough).
  bool user_api = false;
};

// The entry for `method`, or nullptr for a method not in the table (such a method is
// refused: a new RPC must be added to the table to be callable).
const MethodAccess* FindMethodAccess(std::string_view method);

// "submitter or admin" for an entry's roles (for refusal messages).
std::string AllowedRolesText(uint32_t roles);

}  // namespace mlcd
