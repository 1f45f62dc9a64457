// TLS for every gRPC server and client of the system (docs/security.md, "Transport").
//
// A TlsConfig is the process's certificate, private key and CA bundle, all PEM files:
//   servers  present cert/key; with a CA they require and verify a client certificate (mTLS)
//   clients  verify the server against the CA; with cert/key they present them (mTLS)
// Files are checked when the config is opened (they parse, the key matches the certificate)
// and served from a private copy (a 0700 temporary folder): Reload(), which the services call
// on SIGHUP, re-reads and re-checks the configured files and swaps the copy; gRPC's file
// watcher (one-second period) hands the new material to every listener and channel, so
// connections made after the reload use the new certificates and open ones keep theirs. A
// reload whose files do not check out keeps the old material and says why. The private
// copies are removed when the process exits.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace mlcd {

struct TlsFiles {
  // PEM certificate chain this process presents (server identity; client identity for mTLS).
  std::string cert;
  // PEM private key of `cert`.
  std::string key;
  // PEM CA bundle: servers verify client certificates with it (and then require one);
  // clients verify servers with it.
  std::string ca;

  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

class TlsConfig {
 public:
  // Checks `files` (cert and key come together; a client may give only a CA) and makes the
  // private copy. INVALID_ARGUMENT naming the flag (--tls-cert, --tls-key, --tls-ca) and what
  // is wrong with it.
  static StatusOr<std::shared_ptr<TlsConfig>> Open(const TlsFiles& files);
  ~TlsConfig();

  // Re-reads the configured files; on success the new material is served within a second.
  Status Reload();

  bool has_identity() const { return !files_.cert.empty(); }
  bool has_ca() const { return !files_.ca.empty(); }
  const TlsFiles& files() const { return files_; }

  // Server credentials: TLS with this identity; client certificates required and verified
  // against the CA when there is one. FAILED_PRECONDITION without a certificate.
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials() const;
  // Channel credentials: the server verified against the CA (the system roots without one),
  // this identity presented when there is one.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

 private:
  explicit TlsConfig(TlsFiles files) : files_(std::move(files)) {}
  Status Install();

  TlsFiles files_;
  std::string private_dir_;
  int generation_ = 0;
  std::mutex mu_;
  std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> provider_;
};

// True when `host` (from --listen HOST:PORT) only accepts connections from this machine:
// 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace mlcd
