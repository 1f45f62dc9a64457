// The one way to reach mlcd-coordinator's gRPC API (library mlcd_coordinator_client in
// clients/: gRPC only; depends on proto/ and common/ only), used by mlcdctl, the worker agent
// and the tests. Namespace mlcd::coordinator: the stub speaks the coordinator's wire contract
// (proto/mlcd/v1/coordinator.proto).
//
//   auto stub = mlcd::coordinator::NewCoordinatorStub("127.0.0.1:7600");
//   grpc::ClientContext context;
//   context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
//   grpc::Status s = stub->GetJob(&context, request, &job);
//
// The channel has the system's message limits and reconnect settings (MakeChannel in
// common/grpc_server.h); it connects lazily, so building a stub never fails. Callers set
// their own deadlines per call; a stub is thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "mlcd/v1/coordinator.grpc.pb.h"

namespace mlcd::coordinator {

// A stub over its own channel to `address` (host:port).
std::unique_ptr<v1::Coordinator::Stub> NewCoordinatorStub(const std::string& address);

// A stub over an existing channel (e.g. one the caller keeps to close it first on shutdown);
// build that channel with MakeChannel (common/grpc_server.h).
std::unique_ptr<v1::Coordinator::Stub> NewCoordinatorStub(std::shared_ptr<grpc::Channel> channel);

}  // namespace mlcd::coordinator
