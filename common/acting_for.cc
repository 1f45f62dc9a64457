#include "common/acting_for.h"

namespace mlcd {
namespace {

bool PrintableNoSpace(std::string_view s) {
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// A token role, or "service" (a service acting as itself, forwarded by another).
StatusOr<Role> ParseActingRole(const std::string& name) {
  if (name == RoleName(Role::kService)) return Role::kService;
  return ParseTokenRole(name);
}

}  // namespace

ActingFor ActingForJob(const std::string& job_id) {
  return ActingFor{std::string(kJobIdentityPrefix) + job_id, Role::kSubmitter};
}

ActingFor ActingForPrincipal(const Principal& caller) {
  return ActingFor{caller.identity, caller.role};
}

void AttachActingFor(const ActingFor& acting, grpc::ClientContext* context) {
  if (acting.empty()) return;
  context->AddMetadata(kActingForHeader,
                       std::string(RoleName(acting.role)) + " " + acting.identity);
}

StatusOr<Principal> ActingPrincipal(const grpc::ServerContextBase& context,
                                    const Principal& caller) {
  const auto& md = context.client_metadata();
  auto it = md.find(kActingForHeader);
  if (it == md.end()) return caller;
  const std::string_view value(it->second.data(), it->second.size());
  if (caller.checked && caller.role != Role::kService) {
    return Status(StatusCode::kPermissionDenied,
                  "'" + caller.identity + "' (role " + RoleName(caller.role) + ") sent " +
                      kActingForHeader +
                      ": only a service (a client certificate without a token) may act for "
                      "another identity; drop the header");
  }
  const size_t space = value.find(' ');
  const std::string role_name(value.substr(0, space == std::string_view::npos ? 0 : space));
  const std::string_view identity =
      space == std::string_view::npos ? std::string_view() : value.substr(space + 1);
  StatusOr<Role> role = ParseActingRole(role_name);
  if (space == std::string_view::npos || !role.ok() || identity.empty() ||
      identity.size() > kMaxActingIdentityChars || !PrintableNoSpace(identity) ||
      identity.find(':') == std::string_view::npos) {
    return Status::InvalidArgument(
        std::string(kActingForHeader) +
        " must be 'ROLE IDENTITY' (ROLE one of viewer, submitter, admin, worker, service; IDENTITY "
        "'token:NAME', 'cert:CN' or 'job:ID', printable, at most " +
        std::to_string(kMaxActingIdentityChars) + " characters)");
  }
  Principal acting;
  acting.identity = std::string(identity);
  acting.role = *role;
  acting.checked = caller.checked;
  acting.via = caller.identity;
  return acting;
}

}  // namespace mlcd
