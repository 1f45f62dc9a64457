#include "common/security.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/support/client_interceptor.h>

#include <cstdlib>
#include <ctime>
#include <iostream>
#include <mutex>
#include <set>

#include "common/log.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/tokens.h"

namespace mlcd {
namespace {

struct State {
  Mutex mu;
  bool configured GUARDED_BY(mu) = false;
  SecurityOptions options GUARDED_BY(mu);
  std::shared_ptr<TlsConfig> tls GUARDED_BY(mu);
  std::shared_ptr<const TokenTable> tokens GUARDED_BY(mu);
  std::string client_token GUARDED_BY(mu);
  // Loopback addresses already warned about (insecure_token), so a process that makes many
  // channels to one address logs it once.
  std::set<std::string> warned_plaintext_token GUARDED_BY(mu);
};

State& GetState() {
  static State* state = new State();
  return *state;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

struct Loaded {
  std::shared_ptr<TlsConfig> tls;
  std::shared_ptr<const TokenTable> tokens;
  std::string client_token;
};

StatusOr<Loaded> Load(const SecurityOptions& options) {
  Loaded loaded;
  if (!options.tls.empty()) {
    MLCD_ASSIGN_OR_RETURN(loaded.tls, TlsConfig::Open(options.tls, options.state_dir));
  }
  if (!options.tokens_file.empty()) {
    MLCD_ASSIGN_OR_RETURN(TokenTable table, TokenTable::Load(options.tokens_file));
    loaded.tokens = std::make_shared<const TokenTable>(std::move(table));
  }
  if (!options.token_file.empty()) {
    MLCD_ASSIGN_OR_RETURN(loaded.client_token, ReadClientToken(options.token_file));
  }
  return loaded;
}

// With mu held: the settings, from the environment when nothing configured them.
void EnsureConfigured(State& s) REQUIRES(s.mu) {
  if (s.configured) return;
  s.configured = true;
  s.options = SecurityOptionsFromEnv();
  auto loaded = Load(s.options);
  if (!loaded.ok()) {
    // Fail closed: TLS stays on (channels verify against no CA and fail), no token is
    // accepted (an empty table refuses every caller).
    MLCD_LOG(ERROR) << "security settings from the environment: " << loaded.status().ToString();
    s.tokens = std::make_shared<const TokenTable>();
    return;
  }
  s.tls = loaded->tls;
  s.tokens = loaded->tokens;
  s.client_token = loaded->client_token;
}

class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      State& s = GetState();
      std::string token;
      {
        MutexLock lock(&s.mu);
        token = s.client_token;
      }
      // A call that set its own authorization (ClientContext::AddMetadata) keeps it.
      auto* md = methods->GetSendInitialMetadata();
      if (!token.empty() && md->find("authorization") == md->end())
        md->emplace("authorization", "Bearer " + token);
    }
    methods->Proceed();
  }
};

// The interceptor of a channel CheckChannelSecurity refused: it hijacks every call at its
// first batch, before the channel connects, so neither metadata nor messages are sent; the
// call's sends and receives fail and its status is the refusal.
class RefusingInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RefusingInterceptor(grpc::Status refusal) : refusal_(std::move(refusal)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (hijacked_ && methods->QueryInterceptionHookPoint(Hook::PRE_SEND_MESSAGE))
      methods->FailHijackedSendMessage();
    if (methods->QueryInterceptionHookPoint(Hook::PRE_RECV_MESSAGE))
      methods->FailHijackedRecvMessage();
    if (methods->QueryInterceptionHookPoint(Hook::PRE_RECV_STATUS))
      *methods->GetRecvStatus() = refusal_;
    if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_INITIAL_METADATA)) {
      hijacked_ = true;
      methods->Hijack();
      return;
    }
    methods->Proceed();
  }

 private:
  const grpc::Status refusal_;
  bool hijacked_ = false;
};

class RefusingInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit RefusingInterceptorFactory(grpc::Status refusal) : refusal_(std::move(refusal)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new RefusingInterceptor(refusal_);
  }

 private:
  const grpc::Status refusal_;
};

// With mu held: whether channels use TLS, i.e. ChannelCredentials() is not plaintext.
bool ChannelsUseTls(const State& s) REQUIRES(s.mu) {
  return (s.tls && (s.tls->has_ca() || s.tls->has_identity())) || !s.options.tls.ca.empty();
}

class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor();
  }
};

std::string PeerCommonName(const grpc::ServerContextBase& context) {
  auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return "";
  for (const char* prop : {"x509_common_name", "x509_subject_alternative_name"}) {
    auto values = auth->FindPropertyValues(prop);
    if (!values.empty()) return std::string(values[0].data(), values[0].size());
  }
  return "";
}

// Whether the peer's certificate is a user's (subject OU=mlcd-user, access_policy.h): it
// proves nothing beyond being allowed to connect, so it gives no service role.
bool IsUserCertificate(const grpc::ServerContextBase& context) {
  auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return false;
  const std::string unit = std::string("OU=") + kUserCertUnit;
  for (const auto& value : auth->FindPropertyValues("x509_subject")) {
    // RFC 2253 form, e.g. "CN=alice,OU=mlcd-user"; a component is matched whole.
    const std::string subject(value.data(), value.size());
    size_t begin = 0;
    while (begin <= subject.size()) {
      size_t end = subject.find(',', begin);
      if (end == std::string::npos) end = subject.size();
      size_t b = subject.find_first_not_of(' ', begin);
      if (b != std::string::npos && b < end && subject.compare(b, end - b, unit) == 0) return true;
      begin = end + 1;
    }
  }
  return false;
}

// The bearer token of the call ("" when none); false when the header is malformed.
bool BearerToken(const grpc::ServerContextBase& context, std::string* token) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return true;
  const std::string value(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  if (value.rfind(prefix, 0) != 0) return false;
  *token = value.substr(prefix.size());
  return true;
}

std::string MethodName(std::string_view method) {
  size_t slash = method.rfind('/');
  return std::string(slash == std::string_view::npos ? method : method.substr(slash + 1));
}

}  // namespace

SecurityOptions SecurityOptionsFromEnv() {
  SecurityOptions o;
  o.tls.cert = Env("MLCD_TLS_CERT");
  o.tls.key = Env("MLCD_TLS_KEY");
  o.tls.ca = Env("MLCD_TLS_CA");
  o.tokens_file = Env("MLCD_TOKENS_FILE");
  o.token_file = Env("MLCD_TOKEN_FILE");
  o.insecure_token = Env("MLCD_INSECURE_TOKEN") == "1";
  return o;
}

void AddSecurityFlags(CLI::App& app, SecurityOptions* options, bool server) {
  app.add_option("--tls-cert", options->tls.cert,
                 "PEM certificate this process presents (env MLCD_TLS_CERT)")
      ->envname("MLCD_TLS_CERT");
  app.add_option("--tls-key", options->tls.key, "PEM private key of --tls-cert (env MLCD_TLS_KEY)")
      ->envname("MLCD_TLS_KEY");
  app.add_option("--tls-ca", options->tls.ca,
                 server ? "PEM CA bundle; clients must present a certificate it signed (mTLS) "
                          "(env MLCD_TLS_CA)"
                        : "PEM CA bundle the servers' certificates are verified with; TLS is on "
                          "when set (env MLCD_TLS_CA)")
      ->envname("MLCD_TLS_CA");
  app.add_option("--token-file", options->token_file,
                 "file holding the bearer token sent with every call (env MLCD_TOKEN_FILE)")
      ->envname("MLCD_TOKEN_FILE");
  options->insecure_token = Env("MLCD_INSECURE_TOKEN") == "1";
  if (!server) {
    app.add_flag("--insecure", options->insecure_token,
                 "without --tls-ca, send the bearer token in plaintext anyway, to a loopback "
                 "address only (127.0.0.0/8, ::1, localhost): any process on this host that "
                 "can read loopback traffic can read the token (env MLCD_INSECURE_TOKEN=1)");
    return;
  }
  app.add_option("--tokens-file", options->tokens_file,
                 "accepted bearer tokens, lines 'TOKEN ROLE NAME [expires=UNIX_SECONDS]'; "
                 "reloaded on SIGHUP (env MLCD_TOKENS_FILE; docs/security.md)")
      ->envname("MLCD_TOKENS_FILE");
  app.add_flag("--insecure", options->insecure,
               "allow plaintext gRPC on a non-loopback --listen address (logged as a warning)");
}

Status ConfigureSecurity(const SecurityOptions& options) {
  MLCD_ASSIGN_OR_RETURN(Loaded loaded, Load(options));
  State& s = GetState();
  MutexLock lock(&s.mu);
  s.configured = true;
  s.options = options;
  s.tls = loaded.tls;
  s.tokens = loaded.tokens;
  s.client_token = loaded.client_token;
  return Status::Ok();
}

bool ApplySecurityFlags(const SecurityOptions& options) {
  Status s = ConfigureSecurity(options);
  if (s.ok()) return true;
  std::cerr << "error: " << s.message() << "\n";
  return false;
}

void ReloadSecurity() {
  State& s = GetState();
  std::shared_ptr<TlsConfig> tls;
  SecurityOptions options;
  {
    MutexLock lock(&s.mu);
    EnsureConfigured(s);
    tls = s.tls;
    options = s.options;
  }
  if (tls) (void)tls->Reload();
  if (!options.tokens_file.empty()) {
    auto table = TokenTable::Load(options.tokens_file);
    if (table.ok()) {
      MLCD_LOG(INFO) << "tokens file " << options.tokens_file << " reloaded (" << table->size()
                     << " tokens)";
      MutexLock lock(&s.mu);
      s.tokens = std::make_shared<const TokenTable>(std::move(table).value());
    } else {
      MLCD_LOG(ERROR) << "tokens file reload failed, keeping the previous tokens: "
                      << table.status().ToString();
    }
  }
  if (!options.token_file.empty()) {
    auto token = ReadClientToken(options.token_file);
    MutexLock lock(&s.mu);
    if (token.ok()) s.client_token = *token;
    if (!token.ok()) MLCD_LOG(ERROR) << "token file reload failed: " << token.status().ToString();
  }
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const std::string& listen_address) {
  State& s = GetState();
  MutexLock lock(&s.mu);
  EnsureConfigured(s);
  std::string host;
  int port = 0;
  MLCD_RETURN_IF_ERROR(SplitHostPort(listen_address, "--listen", &host, &port));
  const bool loopback = IsLoopbackHost(host);
  if (s.tls && s.tls->has_identity()) {
    if (!loopback && !s.tls->has_ca() && !s.tokens && !s.options.insecure) {
      return Status::FailedPrecondition(
          "refusing to serve " + listen_address +
          " with TLS but no way to tell callers apart: give --tls-ca (clients must present a "
          "certificate it signed) or --tokens-file (callers need a token), or --insecure");
    }
    return s.tls->ServerCredentials();
  }
  if (!loopback) {
    if (!s.options.insecure) {
      return Status::FailedPrecondition(
          "refusing plaintext gRPC on non-loopback address " + listen_address +
          ": give --tls-cert and --tls-key (and --tls-ca for mTLS; env MLCD_TLS_CERT, "
          "MLCD_TLS_KEY, MLCD_TLS_CA), listen on 127.0.0.1, or pass --insecure to accept "
          "that anyone on the network can read and forge its traffic");
    }
    MLCD_LOG(WARNING) << "--insecure: serving plaintext gRPC on " << listen_address
                      << "; anyone on the network can read and forge its traffic";
  }
  return grpc::InsecureServerCredentials();
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() {
  State& s = GetState();
  MutexLock lock(&s.mu);
  EnsureConfigured(s);
  if (s.tls && s.tls->has_ca()) return s.tls->ChannelCredentials();
  if (ChannelsUseTls(s)) {
    // TLS was asked for but cannot be set up: verify against the system roots (fails for
    // the system's own CA) rather than fall back to plaintext.
    return grpc::experimental::TlsCredentials(grpc::experimental::TlsChannelCredentialsOptions());
  }
  return grpc::InsecureChannelCredentials();
}

Status CheckChannelSecurity(const std::string& address) {
  State& s = GetState();
  MutexLock lock(&s.mu);
  EnsureConfigured(s);
  if (s.options.token_file.empty() || ChannelsUseTls(s)) return Status::Ok();
  std::string host;
  int port = 0;
  const bool loopback =
      SplitHostPort(address, "address", &host, &port).ok() && IsLoopbackHost(host);
  const std::string refusing =
      "refusing to send the bearer token (--token-file / MLCD_TOKEN_FILE) in plaintext to " +
      address + ": give --tls-ca (env MLCD_TLS_CA) to use TLS";
  if (!loopback) {
    return Status::FailedPrecondition(
        refusing +
        "; a token goes in plaintext only to a loopback address (127.0.0.0/8, ::1, "
        "localhost) with --insecure (env MLCD_INSECURE_TOKEN=1)");
  }
  if (!s.options.insecure_token) {
    return Status::FailedPrecondition(
        refusing +
        ", or, as it is a loopback address, pass --insecure (mlcdctl; env "
        "MLCD_INSECURE_TOKEN=1 for every process) to send the token in plaintext");
  }
  if (s.warned_plaintext_token.insert(address).second) {
    MLCD_LOG(WARNING) << "--insecure / MLCD_INSECURE_TOKEN: sending the bearer token in "
                         "plaintext to loopback address "
                      << address << "; any process that can read this host's loopback "
                      << "traffic can read it";
  }
  return Status::Ok();
}

std::shared_ptr<grpc::Channel> CreateSecureChannel(const std::string& address,
                                                   const grpc::ChannelArguments& args) {
  auto creds = ChannelCredentials();
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  Status allowed = CheckChannelSecurity(address);
  if (!allowed.ok()) {
    factories.push_back(std::make_unique<RefusingInterceptorFactory>(ToGrpcStatus(allowed)));
  } else {
    State& s = GetState();
    MutexLock lock(&s.mu);
    if (!s.options.token_file.empty())
      factories.push_back(std::make_unique<TokenInterceptorFactory>());
  }
  if (factories.empty()) return grpc::CreateCustomChannel(address, creds, args);
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args,
                                                                 std::move(factories));
}

grpc::Status AuthorizeCall(const grpc::ServerContextBase& context, std::string_view method,
                           Principal* caller) {
  State& s = GetState();
  std::shared_ptr<const TokenTable> tokens;
  {
    MutexLock lock(&s.mu);
    EnsureConfigured(s);
    tokens = s.tokens;
  }
  const std::string cn = PeerCommonName(context);
  *caller = Principal();
  if (!tokens) {
    caller->identity = cn.empty() ? "" : "cert:" + cn;
    caller->role = Role::kAdmin;
    return grpc::Status::OK;
  }
  caller->checked = true;
  const std::string name = MethodName(method);
  const MethodAccess* access = FindMethodAccess(method);
  if (!access) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        name + " is not in the service's access table (access_policy.cc)");
  }
  std::string token;
  if (!BearerToken(context, &token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the authorization header is not 'Bearer TOKEN'");
  }
  if (!token.empty()) {
    const TokenEntry* entry = tokens->Lookup(token);
    if (!entry) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the bearer token is not in the service's tokens file; check "
                          "--token-file / MLCD_TOKEN_FILE, or ask an admin for a token");
    }
    if (entry->expires_unix > 0 && std::time(nullptr) >= entry->expires_unix) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the token of '" + entry->name + "' expired at unix time " +
                              std::to_string(entry->expires_unix) + "; ask an admin for a new one");
    }
    caller->identity = "token:" + entry->name;
    caller->role = entry->role;
  } else if (!cn.empty() && !access->user_api && !IsUserCertificate(context)) {
    caller->identity = "cert:" + cn;
    caller->role = Role::kService;
  } else {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        name + " needs a bearer token with role " + AllowedRolesText(access->roles) +
            " (metadata 'authorization: Bearer TOKEN'; mlcdctl: --token-file or MLCD_TOKEN_FILE)" +
            (access->user_api ? ""
                              : " or a service's client certificate signed by its --tls-ca (a "
                                "user certificate, OU=" +
                                    std::string(kUserCertUnit) + ", needs a token)"));
  }
  if (!(access->roles & static_cast<uint32_t>(caller->role))) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "'" + caller->identity.substr(caller->identity.find(':') + 1) +
                            "' has role " + RoleName(caller->role) + "; " + name + " needs " +
                            AllowedRolesText(access->roles));
  }
  return grpc::Status::OK;
}

}  // namespace mlcd
