#include "common/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <ctime>

#include "common/log.h"
#include "common/security.h"

namespace mlcd {
namespace {

std::atomic<bool> g_shutdown_requested{false};

}  // namespace

void InstallShutdownSignalHandling() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A vanished client must never kill a server.
  signal(SIGPIPE, SIG_IGN);
}

int WaitForShutdownSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  while (!g_shutdown_requested.load()) {
    struct timespec timeout = {0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &timeout);
    if (sig == SIGHUP) {
      MLCD_LOG(INFO) << "received SIGHUP, reloading certificates and tokens";
      ReloadSecurity();
      continue;
    }
    if (sig > 0) {
      g_shutdown_requested = true;
      MLCD_LOG(INFO) << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", shutting down";
      return sig;
    }
  }
  return 0;
}

void RequestShutdown() { g_shutdown_requested = true; }
bool ShutdownRequested() { return g_shutdown_requested.load(); }

GrpcServerRunner::GrpcServerRunner(std::string service_name)
    : service_name_(std::move(service_name)) {}

GrpcServerRunner::~GrpcServerRunner() { Shutdown(std::chrono::milliseconds(0)); }

void GrpcServerRunner::AddService(grpc::Service* service) { services_.push_back(service); }

Status GrpcServerRunner::Start(const std::string& listen_address) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto credentials = ServerCredentialsFor(listen_address);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen_address, *credentials, &port_);
  builder.SetMaxReceiveMessageSize(max_receive_bytes_);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  for (grpc::Service* service : services_) builder.RegisterService(service);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    return Status::Unavailable(
        "cannot listen on " + listen_address +
        " (address in use or invalid; pass another with --listen HOST:PORT)");
  }
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
  }
  if (!health_listen_.empty()) {
    grpc::ServerBuilder health_builder;
    int health_port = 0;
    // Plaintext on purpose: it tells only SERVING or not (the probe cannot speak TLS).
    health_builder.AddListeningPort(health_listen_, grpc::InsecureServerCredentials(),
                                    &health_port);
    health_server_ = health_builder.BuildAndStart();
    if (!health_server_ || health_port == 0) {
      Shutdown(std::chrono::milliseconds(0));
      return Status::Unavailable("cannot listen on --health-listen " + health_listen_ +
                                 " (address in use or invalid)");
    }
    if (auto* health = health_server_->GetHealthCheckService()) health->SetServingStatus(true);
    MLCD_LOG(INFO) << service_name_ << " health (plaintext, health only) on " << health_listen_;
  }
  MLCD_LOG(INFO) << service_name_ << " listening on " << listen_address << " (port " << port_
                 << ")";
  return Status::Ok();
}

void GrpcServerRunner::WaitForShutdown(std::chrono::milliseconds grace) {
  WaitForShutdownSignal();
  Shutdown(grace);
}

void GrpcServerRunner::Shutdown(std::chrono::milliseconds grace) {
  if (!server_ || shut_down_) return;
  shut_down_ = true;
  if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(false);
  if (health_server_) {
    if (auto* health = health_server_->GetHealthCheckService()) health->SetServingStatus(false);
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_->Wait();
  }
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  MLCD_LOG(INFO) << service_name_ << " stopped";
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  // Loopback services restart in tests and on a laptop: reconnect quickly.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return CreateSecureChannel(address, args);
}

Status WaitForChannel(const std::shared_ptr<grpc::Channel>& channel, const std::string& what,
                      const std::string& address, std::chrono::milliseconds timeout) {
  // A channel CreateSecureChannel refused would connect but fail every call: say why now.
  MLCD_RETURN_IF_ERROR(CheckChannelSecurity(address));
  if (channel->WaitForConnected(DeadlineIn(timeout))) return Status::Ok();
  return Status::Unavailable("cannot reach " + what + " at " + address + " within " +
                             std::to_string(timeout.count()) +
                             " ms; is it running? (set its address with the flag "
                             "or environment variable named in --help)");
}

}  // namespace mlcd
