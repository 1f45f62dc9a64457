// TLS for every gRPC server and client of the system (docs/security.md, "Transport").
//
// A TlsConfig is the process's certificate, private key and CA bundle, all PEM files:
//   servers  present cert/key; with a CA they require and verify a client certificate (mTLS)
//   clients  verify the server against the CA; with cert/key they present them (mTLS)
// Files are checked when the config is opened (they parse, the key matches the certificate).
// Reload() re-reads and re-checks them; a reload whose files do not check out keeps the old
// material and says why. Where the material is served from depends on the process:
//   with a state dir (services and agents: their --data-dir)  from a private copy in
//       STATE_DIR/tls-private (0700, its files 0600, the served generation only), made afresh
//       at each start (replacing a killed one's), removed at a clean exit. The configured files
//       are watched (inode, size, mtime, every kCertFilePollSeconds) and reloaded when they
//       change, as on SIGHUP; gRPC's file watcher (one-second period) hands the new copy to
//       every listener and channel, so connections made after the reload use the new
//       certificates and open ones keep theirs.
//   without (mlcdctl, a worker's training child)  from memory: nothing is written anywhere;
//       a reload applies to the credentials made after it.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include <condition_variable>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

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
  // `state_dir` (may be empty): see the top of this file; made when missing.
  static StatusOr<std::shared_ptr<TlsConfig>> Open(const TlsFiles& files,
                                                   const std::string& state_dir = "");
  ~TlsConfig();

  // Re-reads the configured files; on success the new material is served within a second.
  Status Reload();
  // The private copy's folder ("" when served from memory).
  const std::string& private_dir() const { return private_dir_; }

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
  // The watch of the configured files (with a private copy): reloads when they change.
  void WatchFiles();

  const TlsFiles files_;
  std::string private_dir_;
  mutable Mutex mu_;
  int generation_ GUARDED_BY(mu_) = 0;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_ GUARDED_BY(mu_);
  bool stop_watch_ GUARDED_BY(mu_) = false;
  std::condition_variable watch_cv_;
  std::thread watcher_;
};

// How often a TlsConfig with a private copy looks at its configured files for a renewal.
constexpr int kCertFilePollSeconds = 2;

// True when `host` (from --listen HOST:PORT) only accepts connections from this machine:
// 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace mlcd
