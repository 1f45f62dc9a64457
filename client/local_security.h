// TLS and tokens of the local cluster (`mlcdctl local up`, docs/security.md): unless
// --insecure, the cluster's folder gets tls/ with a CA, one certificate for every service and
// agent (CN mlcd-local-service, SANs 127.0.0.1 and localhost; also their mTLS client
// identity), a tokens file with an admin and a worker token, and one file per token. Made
// with `openssl` the first time and kept, so a restarted cluster and an open shell's
// `source <dir>/env` stay valid.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd::cli {

struct LocalSecurity {
  bool on = false;
  std::string ca, cert, key;
  std::string tokens_file;
  std::string admin_token_file, worker_token_file;

  // Lines "export NAME=value" for the env file (TLS and the admin token).
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
