// The process's security settings, one per process: TLS material (tls_config.h), the tokens
// a service accepts (tokens.h) and the token a client presents. docs/security.md.
//
// Flags (each with an environment fallback; processes that parse no flags, e.g. a worker's
// training child, read the environment on first use):
//   --tls-cert FILE    MLCD_TLS_CERT    PEM certificate: served by servers, presented by clients
//   --tls-key FILE     MLCD_TLS_KEY     its private key
//   --tls-ca FILE      MLCD_TLS_CA      CA bundle: clients verify servers with it (TLS on when
//                                       set); servers require client certificates it signed
//   --tokens-file FILE MLCD_TOKENS_FILE servers: the accepted bearer tokens (callers checked)
//   --token-file FILE  MLCD_TOKEN_FILE  clients: the token sent as `authorization: Bearer`
//   --insecure                          servers: allow plaintext on a non-loopback address
//   --insecure  MLCD_INSECURE_TOKEN=1   clients (mlcdctl's flag; every process reads the
//                                       variable): the token may go in plaintext to a
//                                       loopback address
// SIGHUP (WaitForShutdownSignal, grpc_server.h) calls ReloadSecurity(): certificates, the
// tokens file and the client token are read again; a file that fails keeps the old one.
//
// Servers: GrpcServerRunner takes its credentials from ServerCredentialsFor(); every
// handler starts with AuthorizeCall(context, "/pkg.Service/Method", &caller). Clients:
// MakeChannel (grpc_server.h) builds channels with ChannelCredentials() and the token
// interceptor, through CreateSecureChannel(), the one place that applies the client's
// transport rule (CheckChannelSecurity): a bearer token goes only over TLS, or in plaintext
// to a loopback address when the process opted in.
#pragma once

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/access_policy.h"
#include "common/status.h"
#include "common/tls_config.h"

namespace mlcd {

struct SecurityOptions {
  TlsFiles tls;
  // Server side: the tokens file; empty = callers are not checked.
  std::string tokens_file;
  // Client side: a file holding this process's bearer token; empty = none sent.
  std::string token_file;
  // Server side: plaintext on a non-loopback address is allowed (with a warning).
  bool insecure = false;
  // Client side: without TLS the bearer token may still go, in plaintext, to a loopback
  // address (with a warning); never to any other address.
  bool insecure_token = false;
  // Where the process keeps its state (a service's or agent's --data-dir): the private copy
  // of the TLS material goes to STATE_DIR/tls-private and the TLS files are watched for
  // renewals (tls_config.h). Empty: the material is held in memory and reloaded on SIGHUP only.
  std::string state_dir;
};

// The environment's settings (MLCD_TLS_CERT, MLCD_TLS_KEY, MLCD_TLS_CA, MLCD_TOKENS_FILE,
// MLCD_TOKEN_FILE; MLCD_INSECURE_TOKEN=1 sets insecure_token, any other value leaves it off).
SecurityOptions SecurityOptionsFromEnv();

// Adds --tls-cert, --tls-key, --tls-ca and --token-file, plus for a server --tokens-file
// and --insecure (plaintext serving), for a client --insecure (insecure_token), each with
// its environment fallback. A server's insecure_token comes from MLCD_INSECURE_TOKEN alone.
void AddSecurityFlags(CLI::App& app, SecurityOptions* options, bool server);

// Opens and checks every file and makes `options` the process's settings. INVALID_ARGUMENT
// naming the flag and the problem.
Status ConfigureSecurity(const SecurityOptions& options);
// ConfigureSecurity(); on failure prints "error: ..." to stderr and returns false.
bool ApplySecurityFlags(const SecurityOptions& options);

// SIGHUP: re-reads the TLS files, the tokens file and the client token file.
void ReloadSecurity();

// The credentials a server listening on `listen_address` uses: TLS when a certificate is
// configured; plaintext on a loopback host or with --insecure (logged as a warning).
// FAILED_PRECONDITION, saying what to pass, for plaintext on any other address, and for
// TLS on one without client verification (no --tls-ca) and without a tokens file.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const std::string& listen_address);

// The credentials of this process's channels: TLS verified against --tls-ca (with this
// process's certificate for mTLS) when a CA is configured, plaintext otherwise.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials();

// Whether this process's channels to `address` may carry its bearer token: OK with TLS
// (ChannelCredentials() is not plaintext), without a token file, or in plaintext to a
// loopback host (127.0.0.0/8, ::1, localhost) with insecure_token (a warning is logged, once
// per address). FAILED_PRECONDITION otherwise, saying what to pass: an address that is not
// host:port counts as not loopback.
Status CheckChannelSecurity(const std::string& address);

// A channel to `address` with this process's credentials and token. When
// CheckChannelSecurity(address) refuses, the channel never connects: every call on it ends
// at once with that FAILED_PRECONDITION status, and nothing is sent.
std::shared_ptr<grpc::Channel> CreateSecureChannel(const std::string& address,
                                                   const grpc::ChannelArguments& args);

// Who called.
struct Principal {
  // "token:NAME" or "cert:COMMON_NAME"; "" when the service checks no one and the peer has
  // no certificate. Bindings (a worker's registration, a job's submitter) compare this.
  std::string identity;
  Role role = Role::kNone;
  // True when the service checks callers (a tokens file is configured).
  bool checked = false;
  // When a service acts for this identity (common/acting_for.h): the service's identity.
  std::string via;
};

// Checks the caller of `method` against the tokens file, the peer certificate and the
// access table (access_policy.h). OK with `*caller` filled in; UNAUTHENTICATED (no or an
// unknown or expired token) or PERMISSION_DENIED (a role the method does not allow), each
// saying what is missing. Without a tokens file every caller is allowed, as role admin.
grpc::Status AuthorizeCall(const grpc::ServerContextBase& context, std::string_view method,
                           Principal* caller);

}  // namespace mlcd
