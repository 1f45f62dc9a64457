#include "clients/clusterd_client.h"

#include "common/grpc_server.h"

namespace mlcd::clusterd {

void CallControl::Cancel() {
  MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_) context_->TryCancel();
}

bool CallControl::cancelled() const {
  MutexLock lock(&mu_);
  return cancelled_;
}

void CallControl::Attach(grpc::ClientContext* context) {
  MutexLock lock(&mu_);
  context_ = context;
  if (cancelled_) context_->TryCancel();
}

void CallControl::Detach() {
  MutexLock lock(&mu_);
  context_ = nullptr;
}

ClusterdClient::ClusterdClient(const std::string& address, ClusterdClientOptions options)
    : address_(address),
      options_(options),
      channel_(MakeChannel(address)),
      stub_(v1::Clusterd::NewStub(channel_)) {}

void ClusterdClient::Prepare(grpc::ClientContext* context) const {
  if (options_.deadline.count() > 0) context->set_deadline(DeadlineIn(options_.deadline));
  context->set_wait_for_ready(options_.wait_for_ready);
  AttachActingFor(options_.acting_for, context);
}

Status ClusterdClient::FromRpc(const grpc::Status& status, const char* method) const {
  Status st = FromGrpcStatus(status);
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded) {
    return Status(st.code(), std::string("mlcd-clusterd at ") + address_ + ": " + method + ": " +
                                 st.message());
  }
  return st;
}

template <typename Progress, typename Result>
StatusOr<Result> ClusterdClient::Stream(
    const char* method,
    const std::function<std::unique_ptr<grpc::ClientReader<Progress>>(grpc::ClientContext*)>& open,
    const std::function<void(const Progress&)>& on_progress, CallControl* control) const {
  grpc::ClientContext context;
  Prepare(&context);
  if (control) control->Attach(&context);
  std::unique_ptr<grpc::ClientReader<Progress>> reader = open(&context);
  Progress progress;
  Result result;
  bool got_result = false;
  while (reader->Read(&progress)) {
    if (progress.has_result()) {
      result = progress.result();
      got_result = true;
    }
    if (on_progress) on_progress(progress);
  }
  grpc::Status status = reader->Finish();
  if (control) control->Detach();
  if (!status.ok()) return FromRpc(status, method);
  if (!got_result)
    return Status::Internal(std::string("mlcd-clusterd ended ") + method + " without a result");
  return result;
}

StatusOr<v1::ClusterResult> ClusterdClient::Cluster(
    const v1::ClusterRequest& request,
    const std::function<void(const v1::ClusterProgress&)>& on_progress,
    CallControl* control) const {
  return Stream<v1::ClusterProgress, v1::ClusterResult>(
      "Cluster", [&](grpc::ClientContext* context) { return stub_->Cluster(context, request); },
      on_progress, control);
}

StatusOr<v1::AssignResult> ClusterdClient::Assign(
    const v1::AssignRequest& request,
    const std::function<void(const v1::AssignProgress&)>& on_progress, CallControl* control) const {
  return Stream<v1::AssignProgress, v1::AssignResult>(
      "Assign", [&](grpc::ClientContext* context) { return stub_->Assign(context, request); },
      on_progress, control);
}

v1::SearchMethod SearchMethodToProto(SearchMethod method) {
  switch (method) {
    case SearchMethod::kHnsw:
      return v1::SEARCH_METHOD_HNSW;
    case SearchMethod::kIvf:
      return v1::SEARCH_METHOD_IVF;
    case SearchMethod::kExact:
      break;
  }
  return v1::SEARCH_METHOD_EXACT;
}

StatusOr<SearchMethod> SearchMethodFromProto(v1::SearchMethod method) {
  switch (method) {
    case v1::SEARCH_METHOD_UNSPECIFIED:
    case v1::SEARCH_METHOD_EXACT:
      return SearchMethod::kExact;
    case v1::SEARCH_METHOD_HNSW:
      return SearchMethod::kHnsw;
    case v1::SEARCH_METHOD_IVF:
      return SearchMethod::kIvf;
    default:
      return Status::InvalidArgument("unknown search method " + std::to_string(method));
  }
}

}  // namespace mlcd::clusterd
