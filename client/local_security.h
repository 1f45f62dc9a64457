// TLS and tokens of the local cluster (`mlcdctl local up`, docs/security.md): unless
// --insecure, the cluster's folder gets tls/ with a CA, one certificate for every service and
// agent (service.pem: CN mlcd-local-service, SANs 127.0.0.1 and localhost; also their mTLS
// client identity, role `service`), a user client certificate without service rights
// (user.pem: OU=mlcd-user, CN mlcd-local-user), a tokens file with one token per role
// (viewer, submitter, admin, worker), and one file per token. Made with `openssl` the first
// time and kept, so a restarted cluster and an open shell's `source <dir>/env` stay valid.
// The env file hands users the user certificate and the submitter token, never the service
// certificate (it stays with the services).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::cli {

struct LocalSecurity {
  bool on = false;
  std::string ca, cert, key;  // cert, key: the services' certificate
  std::string user_cert, user_key;
  std::string tokens_file;
  std::string admin_token_file, worker_token_file, submitter_token_file, viewer_token_file;

  // Lines "export NAME=value" for the env file (the CA, the user certificate and the submitter
  // token), and comments naming the viewer and admin token files.
  std::string EnvExports() const;
  // Environment entries for a service (no token: it calls by its certificate) and for a
  // worker agent (the worker token).
  std::vector<std::string> ServiceEnv() const;
  std::vector<std::string> WorkerEnv() const;
};

// Makes (or finds) `dir`/tls and applies it to this process (its calls to the services use
// it; children inherit MLCD_TLS_* and MLCD_TOKENS_FILE). With `insecure`, nothing is made
// and the services listen in plaintext on loopback with no tokens.
StatusOr<LocalSecurity> PrepareLocalSecurity(const std::string& dir, bool insecure);

// Applies an existing `dir`/tls (for `local status`); OK and nothing done when there is none.
Status UseLocalSecurity(const std::string& dir);

}  // namespace mlcd::cli
