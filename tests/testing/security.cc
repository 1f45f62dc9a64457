#include "tests/testing/security.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <ctime>
#include <filesystem>

#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/security.h"

namespace mlcd::testing {
namespace {

std::string g_dir;

void RemoveDir() {
  if (!g_dir.empty() && std::getenv("MLCD_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(g_dir, ec);
  }
}

Status Make(TestSecurity* s) {
  std::string templ = (std::filesystem::temp_directory_path() / "mlcd-test-certs-XXXXXX").string();
  if (!::mkdtemp(templ.data())) return Status::Internal("mkdtemp failed");
  s->dir = g_dir = templ;
  std::atexit(RemoveDir);
  MLCD_ASSIGN_OR_RETURN(s->ca, MakeCertAuthority(s->dir, "ca"));
  MLCD_ASSIGN_OR_RETURN(s->server, IssueCert(s->ca, s->dir, "server", "mlcd-test-service",
                                             {"IP:127.0.0.1", "DNS:localhost"}));
  MLCD_ASSIGN_OR_RETURN(s->other_ca, MakeCertAuthority(s->dir + "/other", "other-ca"));
  MLCD_ASSIGN_OR_RETURN(s->other, IssueCert(s->other_ca, s->dir + "/other", "other",
                                            "mlcd-intruder", {"IP:127.0.0.1", "DNS:localhost"}));
  std::string* tokens[] = {&s->admin_token,      &s->viewer_token, &s->submitter_token,
                           &s->submitter2_token, &s->worker_token, &s->worker2_token,
                           &s->expired_token};
  for (std::string* t : tokens) {
    MLCD_ASSIGN_OR_RETURN(*t, NewRandomToken());
  }
  const std::string past = std::to_string(std::time(nullptr) - 3600);
  s->tokens_file = s->dir + "/tokens";
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(
      s->tokens_file, "# test tokens: TOKEN ROLE NAME [expires=UNIX_SECONDS]\n" + s->admin_token +
                          " admin admin\n" + s->viewer_token + " viewer carol\n" +
                          s->submitter_token + " submitter alice\n" + s->submitter2_token +
                          " submitter bob\n" + s->worker_token + " worker worker-a\n" +
                          s->worker2_token + " worker worker-b\n" + s->expired_token +
                          " admin old-admin expires=" + past + "\n"));
  auto token_file = [&](const std::string& name, const std::string& token, std::string* path) {
    *path = s->dir + "/" + name + ".token";
    return WriteFileAtomically(*path, token + "\n");
  };
  MLCD_RETURN_IF_ERROR(token_file("admin", s->admin_token, &s->admin_token_file));
  MLCD_RETURN_IF_ERROR(token_file("viewer", s->viewer_token, &s->viewer_token_file));
  MLCD_RETURN_IF_ERROR(token_file("submitter", s->submitter_token, &s->submitter_token_file));
  MLCD_RETURN_IF_ERROR(token_file("worker", s->worker_token, &s->worker_token_file));
  return Status::Ok();
}

}  // namespace

const TestSecurity& TestCerts() {
  static TestSecurity* security = [] {
    auto* s = new TestSecurity();
    Status st = Make(s);
    if (!st.ok()) ADD_FAILURE() << "making test certificates: " << st.ToString();
    return s;
  }();
  return *security;
}

Status EnableTestSecurity() {
  const TestSecurity& s = TestCerts();
  ::setenv("MLCD_TLS_CERT", s.server.cert.c_str(), 1);
  ::setenv("MLCD_TLS_KEY", s.server.key.c_str(), 1);
  ::setenv("MLCD_TLS_CA", s.ca.cert.c_str(), 1);
  ::setenv("MLCD_TOKENS_FILE", s.tokens_file.c_str(), 1);
  ::setenv("MLCD_TOKEN_FILE", s.admin_token_file.c_str(), 1);
  static Status applied = ConfigureSecurity(SecurityOptionsFromEnv());
  return applied;
}

std::vector<std::string> NoTokenEnv() { return {"MLCD_TOKEN_FILE="}; }

std::vector<std::string> WorkerTokenEnv() {
  return {"MLCD_TOKEN_FILE=" + TestCerts().worker_token_file};
}

std::unique_ptr<grpc::ClientContext> CallContext(const std::string& token, const ActingFor& acting,
                                                 std::chrono::seconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(DeadlineIn(timeout));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  AttachActingFor(acting, context.get());
  return context;
}

std::shared_ptr<grpc::Channel> TokenlessChannel(const std::string& address) {
  grpc::ChannelArguments args;
  return grpc::CreateCustomChannel(address, ChannelCredentials(), args);
}

}  // namespace mlcd::testing
