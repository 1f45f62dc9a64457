// TLS certificates and tokens for tests, made once per test process with the real `openssl`
// (common/cert_maker.h) in a folder removed at exit.
//
//   ca            the cluster's CA; `server` (CN mlcd-test-service, SANs 127.0.0.1 and
//                 localhost) is every service's and agent's certificate, also used as client
//                 certificate (mTLS identity cert:mlcd-test-service)
//   other_ca      an unrelated CA, with `other` signed by it (wrong-CA tests)
//   tokens_file   the tokens the services accept: admin, viewer, submitter (alice),
//                 submitter2 (bob), worker (worker-a), worker2 (worker-b), expired
//   *_token_file  one file per token (a client's --token-file)
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/acting_for.h"
#include "common/cert_maker.h"
#include "common/status.h"

namespace mlcd::testing {

struct TestSecurity {
  std::string dir;
  CertFiles ca, server, other_ca, other;
  std::string tokens_file;
  std::string admin_token, viewer_token, submitter_token, submitter2_token, worker_token,
      worker2_token, expired_token;
  std::string admin_token_file, viewer_token_file, submitter_token_file, worker_token_file;
};

// Made on first call (aborts the test with a failure when openssl fails).
const TestSecurity& TestCerts();

// Turns TLS and tokens on for this test process and every child it starts afterwards: sets
// MLCD_TLS_CERT/KEY/CA (the `server` certificate), MLCD_TOKENS_FILE and MLCD_TOKEN_FILE (the
// admin token) in the environment and applies them (ConfigureSecurity). Idempotent.
Status EnableTestSecurity();

// Environment entries for a child that should present no token ("MLCD_TOKEN_FILE="; a
// service then acts by its certificate) or the worker token.
std::vector<std::string> NoTokenEnv();
std::vector<std::string> WorkerTokenEnv();

// A call's context on a channel without this process's token interceptor: `token` as bearer
// token ("" = none: the test's certificate, role service), an mlcd-acting-for header when
// `acting` names someone, and a deadline `timeout` from now.
std::unique_ptr<grpc::ClientContext> CallContext(
    const std::string& token, const ActingFor& acting = {},
    std::chrono::seconds timeout = std::chrono::seconds(30));

// A channel to `address` with this process's TLS but without its token interceptor: each call
// brings its own token (CallContext).
std::shared_ptr<grpc::Channel> TokenlessChannel(const std::string& address);

}  // namespace mlcd::testing
