#include "clients/coordinator_client.h"

#include <utility>

#include "common/grpc_server.h"

namespace mlcd::coordinator {

std::unique_ptr<v1::Coordinator::Stub> NewCoordinatorStub(const std::string& address) {
  return NewCoordinatorStub(MakeChannel(address));
}

std::unique_ptr<v1::Coordinator::Stub> NewCoordinatorStub(std::shared_ptr<grpc::Channel> channel) {
  return v1::Coordinator::NewStub(std::move(channel));
}

}  // namespace mlcd::coordinator
