// gRPC server set-up shared by every service (the gRPC examples' RunServer(), once):
// health checking and reflection on, message limits, signal-driven graceful shutdown.
//
//   InstallShutdownSignalHandling();            // first thing in main(), before any thread
//   GrpcServerRunner runner("labelstore");
//   runner.AddService(&service);
//   MLCD_RETURN_IF_ERROR(runner.Start(flags.listen));
//   runner.WaitForShutdown();                   // returns after SIGTERM/SIGINT, server stopped
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace mlcd {

// Largest gRPC message any service sends or accepts (label batches, job specs).
constexpr int kMaxGrpcMessageBytes = 256 << 20;

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every thread it later
// starts), so WaitForShutdownSignal() can receive them synchronously. Call at the top of main().
void InstallShutdownSignalHandling();

// Waits until SIGTERM/SIGINT arrives or RequestShutdown() is called. Returns the signal
// number (0 for RequestShutdown). A SIGHUP meanwhile reloads the process's certificates and
// tokens (ReloadSecurity, security.h) and the wait goes on.
int WaitForShutdownSignal();
// Wakes WaitForShutdownSignal() from inside the process.
void RequestShutdown();
bool ShutdownRequested();

class GrpcServerRunner {
 public:
  explicit GrpcServerRunner(std::string service_name);
  ~GrpcServerRunner();

  // Services must outlive the runner.
  void AddService(grpc::Service* service);

  // Binds `listen_address` (host:port; port 0 picks a free one) and starts serving with
  // health checking (overall and per service, all SERVING) and reflection enabled, with the
  // process's credentials (ServerCredentialsFor, security.h: TLS, or plaintext on loopback
  // or with --insecure). UNAVAILABLE when the address cannot be bound; FAILED_PRECONDITION
  // when the security settings forbid serving it.
  Status Start(const std::string& listen_address);

  // Largest message a call may send this server (default kMaxGrpcMessageBytes); larger ones
  // are refused by gRPC with RESOURCE_EXHAUSTED before any handler runs. Call before Start.
  void set_max_receive_message_bytes(int bytes) { max_receive_bytes_ = bytes; }
  // Also serve the gRPC health service alone, in plaintext, on `address` (HOST:PORT; ""
  // = not). For probes that cannot speak TLS (Kubernetes' grpc probes): it answers SERVING
  // or NOT_SERVING with the main server and carries nothing else. Call before Start().
  void SetHealthListen(std::string address) { health_listen_ = std::move(address); }

  // The bound port.
  int port() const { return port_; }
  grpc::Server* server() { return server_.get(); }

  // Blocks until a shutdown signal, then shuts the server down gracefully: health goes
  // NOT_SERVING, in-flight calls get `grace` to finish, then are cancelled.
  void WaitForShutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // Graceful shutdown without waiting for a signal. Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  std::string service_name_;
  std::vector<grpc::Service*> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string health_listen_;
  std::unique_ptr<grpc::Server> health_server_;
  int port_ = 0;
  int max_receive_bytes_ = kMaxGrpcMessageBytes;
  bool shut_down_ = false;
};

// A client channel with the system's message limits and the process's credentials and
// bearer token (CreateSecureChannel, security.h). `address` is host:port.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Waits until `channel` is connected; UNAVAILABLE with `what` and `address` in the message
// when it is not within `timeout`; CheckChannelSecurity(address)'s refusal (security.h)
// without waiting.
Status WaitForChannel(const std::shared_ptr<grpc::Channel>& channel, const std::string& what,
                      const std::string& address, std::chrono::milliseconds timeout);

// Deadline helper for client contexts.
inline std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

}  // namespace mlcd
