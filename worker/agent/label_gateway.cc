#include "worker/agent/label_gateway.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "clients/write_capability.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/mutex.h"
#include "mlcd/v1/labelstore.grpc.pb.h"

namespace mlcd::worker {
namespace {

// What a child is told when a call is outside its assignment.
constexpr char kWhatAChildMayDo[] =
    "through its agent a worker's child may only read its assignment's label sets and write "
    "its assignment's set with the write capability the assignment carries";

grpc::Status Refused(const std::string& what) {
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, what + ": " + kWhatAChildMayDo);
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

LabelGatewayScope ScopeOf(const v1::Assignment& assignment) {
  LabelGatewayScope scope;
  scope.assignment_id = assignment.id();
  scope.job_id = assignment.job_id();
  scope.labelstore_address = assignment.labelstore_address();
  if (!assignment.label_set().empty()) scope.readable_sets.push_back(assignment.label_set());
  for (const std::string& set : assignment.pseudo_label_sets()) scope.readable_sets.push_back(set);
  if (assignment.kind() == v1::ASSIGNMENT_KIND_ASSIGN_LABELS)
    scope.writable_set = assignment.label_set();
  return scope;
}

// The service: the scope and the upstream stub of the running assignment, read once per call.
class LabelGatewayService final : public v1::LabelStore::Service {
 public:
  void SetScope(LabelGatewayScope scope) LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<v1::LabelStore::Stub> stub;
    if (!scope.labelstore_address.empty()) {
      MutexLock lock(&mu_);
      if (scope.labelstore_address == upstream_address_) stub = upstream_;
    }
    if (!stub && !scope.labelstore_address.empty()) {
      stub = v1::LabelStore::NewStub(MakeChannel(scope.labelstore_address));
    }
    MutexLock lock(&mu_);
    scope_ = std::make_shared<const LabelGatewayScope>(std::move(scope));
    upstream_ = std::move(stub);
    upstream_address_ = scope_->labelstore_address;
  }

  void ClearScope() LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    scope_.reset();
  }

  grpc::Status DescribeLabelSet(grpc::ServerContext* context,
                                const v1::DescribeLabelSetRequest* request,
                                v1::LabelSetInfo* response) override {
    Route route;
    if (grpc::Status st = Readable(request->name(), &route); !st.ok()) return st;
    auto upstream = grpc::ClientContext::FromServerContext(*context);
    return route.stub->DescribeLabelSet(upstream.get(), *request, response);
  }

  grpc::Status GetLabels(grpc::ServerContext* context, const v1::GetLabelsRequest* request,
                         v1::GetLabelsResponse* response) override {
    Route route;
    if (grpc::Status st = Readable(request->name(), &route); !st.ok()) return st;
    auto upstream = grpc::ClientContext::FromServerContext(*context);
    return route.stub->GetLabels(upstream.get(), *request, response);
  }

  grpc::Status WriteLabels(grpc::ServerContext* context,
                           grpc::ServerReader<v1::WriteLabelsRequest>* reader,
                           v1::WriteLabelsResponse* response) override {
    std::string capability;
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find(labelstore::kWriteCapabilityHeader); it != metadata.end())
      capability.assign(it->second.data(), it->second.size());
    if (capability.empty()) return Refused("a write without a write capability");
    Route route;
    if (grpc::Status st = Current(&route); !st.ok()) return st;
    if (route.scope->writable_set.empty())
      return Refused("assignment " + route.scope->assignment_id + " writes no label set");
    auto upstream = grpc::ClientContext::FromServerContext(*context);
    upstream->AddMetadata(labelstore::kWriteCapabilityHeader, capability);
    auto writer = route.stub->WriteLabels(upstream.get(), response);
    v1::WriteLabelsRequest message;
    while (reader->Read(&message)) {
      if (!message.name().empty() && message.name() != route.scope->writable_set) {
        upstream->TryCancel();
        writer->Finish().IgnoreError();  // CANCELLED: nothing of this stream was committed
        return Refused("label set '" + message.name() + "' is not assignment " +
                       route.scope->assignment_id + "'s ('" + route.scope->writable_set + "')");
      }
      if (!writer->Write(message)) break;  // the label store ended the stream: Finish says why
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status CreateLabelSet(grpc::ServerContext*, const v1::CreateLabelSetRequest* request,
                              v1::LabelSetInfo*) override {
    return Refused("CreateLabelSet('" + request->name() + "')");
  }
  grpc::Status DelegateWrites(grpc::ServerContext*, const v1::DelegateWritesRequest* request,
                              v1::DelegateWritesResponse*) override {
    return Refused("DelegateWrites('" + request->name() + "')");
  }
  grpc::Status SealLabelSet(grpc::ServerContext*, const v1::SealLabelSetRequest* request,
                            v1::LabelSetInfo*) override {
    return Refused("SealLabelSet('" + request->name() + "')");
  }
  grpc::Status ListLabelSets(grpc::ServerContext*, const v1::ListLabelSetsRequest*,
                             v1::ListLabelSetsResponse*) override {
    return Refused("ListLabelSets");
  }
  grpc::Status DeleteLabelSet(grpc::ServerContext*, const v1::DeleteLabelSetRequest* request,
                              v1::DeleteLabelSetResponse*) override {
    return Refused("DeleteLabelSet('" + request->name() + "')");
  }

 private:
  struct Route {
    std::shared_ptr<const LabelGatewayScope> scope;
    std::shared_ptr<v1::LabelStore::Stub> stub;
  };

  grpc::Status Current(Route* route) LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      route->scope = scope_;
      route->stub = upstream_;
    }
    if (!route->scope) return Refused("no assignment is running on this worker");
    if (!route->stub) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "assignment " + route->scope->assignment_id + " names no label store");
    }
    return grpc::Status::OK;
  }

  grpc::Status Readable(const std::string& name, Route* route) {
    if (grpc::Status st = Current(route); !st.ok()) return st;
    if (!Contains(route->scope->readable_sets, name)) {
      return Refused("label set '" + name + "' is not one of assignment " +
                     route->scope->assignment_id + "'s");
    }
    return grpc::Status::OK;
  }

  Mutex mu_;
  std::shared_ptr<const LabelGatewayScope> scope_ GUARDED_BY(mu_);
  std::shared_ptr<v1::LabelStore::Stub> upstream_ GUARDED_BY(mu_);
  std::string upstream_address_ GUARDED_BY(mu_);
};

StatusOr<std::unique_ptr<LabelGateway>> LabelGateway::Start(const std::string& socket_path) {
  if (socket_path.empty() || socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::InvalidArgument("the label gateway's socket path '" + socket_path +
                                   "' must have 1 to " +
                                   std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  const std::string folder = socket_path.substr(0, socket_path.rfind('/'));
  if (!folder.empty()) {
    MLCD_RETURN_IF_ERROR(MakeDirs(folder));
    if (::chmod(folder.c_str(), 0700) != 0)
      return Status::Internal("chmod 0700 " + folder + ": " + std::strerror(errno));
  }
  if (::unlink(socket_path.c_str()) != 0 && errno != ENOENT)
    return Status::Internal("cannot remove the stale socket " + socket_path + ": " +
                            std::strerror(errno));
  auto service = std::make_unique<LabelGatewayService>();
  grpc::ServerBuilder builder;
  // Plaintext on a Unix socket in a 0700 folder: only the agent's user reaches it.
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return Status::Internal("cannot serve the label gateway on unix:" + socket_path);
  return std::unique_ptr<LabelGateway>(
      new LabelGateway(socket_path, std::move(service), std::move(server)));
}

LabelGateway::LabelGateway(std::string socket_path, std::unique_ptr<LabelGatewayService> service,
                           std::unique_ptr<grpc::Server> server)
    : socket_path_(std::move(socket_path)),
      address_("unix:" + socket_path_),
      service_(std::move(service)),
      server_(std::move(server)) {}

LabelGateway::~LabelGateway() {
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  ::unlink(socket_path_.c_str());
  ::rmdir(socket_path_.substr(0, socket_path_.rfind('/')).c_str());  // when nothing else is there
}

void LabelGateway::SetScope(LabelGatewayScope scope) { service_->SetScope(std::move(scope)); }

void LabelGateway::ClearScope() { service_->ClearScope(); }

StatusOr<std::string> DefaultGatewaySocket(const std::string& data_dir) {
  const std::string in_data_dir = data_dir + "/gateway/labels.sock";
  if (in_data_dir.size() < sizeof(sockaddr_un::sun_path)) return in_data_dir;
  const char* tmp = std::getenv("TMPDIR");
  std::string folder =
      std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/mlcd-agent-XXXXXX";
  if (::mkdtemp(folder.data()) == nullptr)
    return Status::Internal("mkdtemp " + folder + ": " + std::strerror(errno));
  std::string path = folder + "/labels.sock";
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    ::rmdir(folder.c_str());
    return Status::InvalidArgument("no Unix socket path fits under --data-dir " + data_dir +
                                   " or $TMPDIR; give a shorter --data-dir");
  }
  return path;
}

}  // namespace mlcd::worker
