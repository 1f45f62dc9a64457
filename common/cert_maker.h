// Certificates made at run time with the `openssl` tool: a CA and leaf certificates it signs,
// for the local cluster (`mlcdctl local up`) and the tests. Keys are EC P-256, unencrypted,
// mode 0600. Each leaf serves as both a server and a client certificate (extended key usage
// serverAuth and clientAuth), with the subject alternative names given (e.g. IP:127.0.0.1,
// DNS:localhost). Not for production: a real cluster's certificates come from its own CA
// (docs/security.md, e.g. cert-manager on Kubernetes).
#pragma once

#include <string>
#include <vector>

#include "common/access_policy.h"
#include "common/status.h"

namespace mlcd {

struct CertFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key
};

// Makes `dir`/`name`.pem and `dir`/`name`.key: a self-signed CA valid for 10 years.
// UNAVAILABLE when `openssl` cannot be run, INTERNAL when it fails (its output in
// `dir`/openssl.log).
StatusOr<CertFiles> MakeCertAuthority(const std::string& dir, const std::string& name);

// Makes `dir`/`name`.pem and `dir`/`name`.key signed by `ca`, with subject CN=`common_name`
// and the subject alternative names `sans` ("IP:127.0.0.1", "DNS:localhost"), valid for
// `days` (at least 1).
StatusOr<CertFiles> IssueCert(const CertFiles& ca, const std::string& dir, const std::string& name,
                              const std::string& common_name, const std::vector<std::string>& sans,
                              int days = 825);

// Makes `dir`/`name`.pem and `dir`/`name`.key: a user's client certificate (extended key
// usage clientAuth only) with subject OU=mlcd-user (kUserCertUnit), CN=`common_name`. It lets
// its holder connect to services that require client certificates, but gives no role: every
// call still needs a bearer token (access_policy.h).
StatusOr<CertFiles> IssueUserCert(const CertFiles& ca, const std::string& dir,
                                  const std::string& name, const std::string& common_name,
                                  int days = 825);

// A new random bearer token: 32 hex characters (128 bits from OpenSSL's RAND_bytes).
StatusOr<std::string> NewRandomToken();

}  // namespace mlcd
