#include "client/local_security.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <utility>

#include "common/cert_maker.h"
#include "common/file_util.h"
#include "common/security.h"

namespace mlcd::cli {
namespace {

LocalSecurity Paths(const std::string& dir) {
  const std::string tls = dir + "/tls";
  LocalSecurity s;
  s.on = true;
  s.ca = tls + "/ca.pem";
  s.cert = tls + "/service.pem";
  s.key = tls + "/service.key";
  s.tokens_file = tls + "/tokens";
  s.user_cert = tls + "/user.pem";
  s.user_key = tls + "/user.key";
  s.admin_token_file = tls + "/admin.token";
  s.worker_token_file = tls + "/worker.token";
  s.submitter_token_file = tls + "/submitter.token";
  s.viewer_token_file = tls + "/viewer.token";
  return s;
}

bool Complete(const LocalSecurity& s) {
  for (const auto* p :
       {&s.ca, &s.cert, &s.key, &s.user_cert, &s.user_key, &s.tokens_file, &s.admin_token_file,
        &s.worker_token_file, &s.submitter_token_file, &s.viewer_token_file}) {
    if (!PathExists(*p)) return false;
  }
  return true;
}

Status WritePrivate(const std::string& path, const std::string& text) {
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(path, text));
  ::chmod(path.c_str(), 0600);
  return Status::Ok();
}

Status Make(const std::string& dir, const LocalSecurity& s) {
  const std::string tls = dir + "/tls";
  MLCD_RETURN_IF_ERROR(MakeDirs(tls));
  ::chmod(tls.c_str(), 0700);
  MLCD_ASSIGN_OR_RETURN(CertFiles ca, MakeCertAuthority(tls, "ca"));
  MLCD_RETURN_IF_ERROR(
      IssueCert(ca, tls, "service", "mlcd-local-service", {"IP:127.0.0.1", "DNS:localhost"})
          .status());
  // The users' client certificate: lets them connect (mTLS), gives no service role.
  MLCD_RETURN_IF_ERROR(IssueUserCert(ca, tls, "user", "mlcd-local-user").status());
  std::string lines = "# TOKEN ROLE NAME [expires=UNIX_SECONDS]  (docs/security.md)\n";
  for (const auto& [role, file] :
       {std::pair{"admin", &s.admin_token_file}, std::pair{"worker", &s.worker_token_file},
        std::pair{"submitter", &s.submitter_token_file},
        std::pair{"viewer", &s.viewer_token_file}}) {
    MLCD_ASSIGN_OR_RETURN(std::string token, NewRandomToken());
    MLCD_RETURN_IF_ERROR(WritePrivate(*file, token + "\n"));
    lines += token + " " + role + " local-" + role + "\n";
  }
  // Written last: its presence marks a complete folder.
  return WritePrivate(s.tokens_file, lines);
}

Status Apply(const LocalSecurity& s) {
  ::setenv("MLCD_TLS_CERT", s.cert.c_str(), 1);
  ::setenv("MLCD_TLS_KEY", s.key.c_str(), 1);
  ::setenv("MLCD_TLS_CA", s.ca.c_str(), 1);
  ::setenv("MLCD_TOKENS_FILE", s.tokens_file.c_str(), 1);
  ::setenv("MLCD_TOKEN_FILE", s.admin_token_file.c_str(), 1);
  return ConfigureSecurity(SecurityOptionsFromEnv());
}

}  // namespace

std::string LocalSecurity::EnvExports() const {
  if (!on) return "";
  return "export MLCD_TLS_CA=" + ca + "\nexport MLCD_TLS_CERT=" + user_cert +
         "\nexport MLCD_TLS_KEY=" + user_key + "\nexport MLCD_TOKEN_FILE=" + submitter_token_file +
         "\n# other roles: MLCD_TOKEN_FILE=" + viewer_token_file + " (viewer) or " +
         admin_token_file + " (admin)\n";
}

std::vector<std::string> LocalSecurity::ServiceEnv() const {
  if (!on) return {};
  return {"MLCD_TOKEN_FILE="};
}

std::vector<std::string> LocalSecurity::WorkerEnv() const {
  if (!on) return {};
  return {"MLCD_TOKEN_FILE=" + worker_token_file};
}

StatusOr<LocalSecurity> PrepareLocalSecurity(const std::string& dir, bool insecure) {
  if (insecure) {
    // Children must not pick up TLS or tokens from the caller's environment either.
    for (const char* v :
         {"MLCD_TLS_CERT", "MLCD_TLS_KEY", "MLCD_TLS_CA", "MLCD_TOKENS_FILE", "MLCD_TOKEN_FILE"})
      ::unsetenv(v);
    MLCD_RETURN_IF_ERROR(ConfigureSecurity(SecurityOptions()));
    return LocalSecurity();
  }
  LocalSecurity s = Paths(dir);
  if (!Complete(s)) MLCD_RETURN_IF_ERROR(Make(dir, s));
  MLCD_RETURN_IF_ERROR(Apply(s));
  return s;
}

Status UseLocalSecurity(const std::string& dir) {
  LocalSecurity s = Paths(dir);
  if (!Complete(s)) return Status::Ok();
  return Apply(s);
}

}  // namespace mlcd::cli
