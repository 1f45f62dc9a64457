// The label store as a worker agent's children reach it. A child runs decoders (images, tar,
// npy) on data it did not choose, so it holds no certificate, key or token of the agent: the
// agent starts it without them (worker/agent/child_environment.h) and gives it the address
// of this gateway instead of the label store's. The gateway is a mlcd.v1.LabelStore service on
// a Unix socket in a folder only the agent's user may enter; it forwards to the real label
// store over the agent's own channel (its TLS and token), and only what the running
// assignment needs:
//   - DescribeLabelSet and GetLabels of the assignment's sets (label_set and the
//     pseudo_label_sets of earlier MCL stages);
//   - WriteLabels of label_set, for an ASSIGN_LABELS assignment, and only by the write
//     capability the stream carries (clients/write_capability.h), which the gateway passes on
//     and the label store checks: the agent's identity grants no write;
//   - nothing else: every other call, a set outside the assignment, a write without a
//     capability, or any call while no assignment runs is PERMISSION_DENIED, saying what a
//     child may do.
// Deadlines and cancellation pass through and the label store's status comes back unchanged.
// No other metadata of a child's call is passed on, so a child cannot make the agent act for
// anyone (common/acting_for.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/coordinator.pb.h"

namespace grpc {
class Server;
}

namespace mlcd::worker {

// What the running assignment may do through the gateway.
struct LabelGatewayScope {
  std::string assignment_id;
  std::string job_id;
  // The real label store (host:port); "" = the assignment has none.
  std::string labelstore_address;
  // Sets DescribeLabelSet and GetLabels may name.
  std::vector<std::string> readable_sets;
  // The one set WriteLabels may name ("" = none), with a capability.
  std::string writable_set;
};

// The scope of `assignment`: label_set and pseudo_label_sets readable, label_set writable for
// ASSIGN_LABELS.
LabelGatewayScope ScopeOf(const v1::Assignment& assignment);

class LabelGatewayService;

class LabelGateway {
 public:
  // Listens on `socket_path` (its folder is made 0700 and a stale socket there is removed).
  // Unix socket paths are short (107 bytes): DefaultGatewaySocket picks one that fits.
  static StatusOr<std::unique_ptr<LabelGateway>> Start(const std::string& socket_path);
  ~LabelGateway();  // stops serving (calls in flight are cancelled) and removes the socket
  LabelGateway(const LabelGateway&) = delete;
  LabelGateway& operator=(const LabelGateway&) = delete;

  // The gRPC address children dial: "unix:<socket path>".
  const std::string& address() const { return address_; }
  // The assignment that runs from now on (its child's calls are checked against it).
  void SetScope(LabelGatewayScope scope);
  // No assignment runs: every call is refused.
  void ClearScope();

 private:
  LabelGateway(std::string socket_path, std::unique_ptr<LabelGatewayService> service,
               std::unique_ptr<grpc::Server> server);

  std::string socket_path_;
  std::string address_;
  std::unique_ptr<LabelGatewayService> service_;
  std::unique_ptr<grpc::Server> server_;
};

// <data_dir>/gateway/labels.sock when that fits a Unix socket path, else a fresh 0700 folder
// under $TMPDIR (or /tmp) named mlcd-agent-XXXXXX.
StatusOr<std::string> DefaultGatewaySocket(const std::string& data_dir);

}  // namespace mlcd::worker
