#include "clusterd/client.h"

#include "common/grpc_server.h"

namespace mlcd::clusterd {

void CallControl::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (context_) context_->TryCancel();
}

bool CallControl::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void CallControl::Attach(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  context_ = context;
  if (cancelled_) context_->TryCancel();
}

void CallControl::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
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
}

Status ClusterdClient::FromRpc(const grpc::Status& status, const char* method) const {
  Status st = FromGrpcStatus(status);
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded) {
    return Status(st.code(), std::string("mlcd-clusterd at ") + address_ + ": " + method + ": " +
                                 st.message());
  }
  return st;
}

StatusOr<v1::ClusterResult> ClusterdClient::Cluster(
    const v1::ClusterRequest& request,
    const std::function<void(const v1::ClusterProgress&)>& on_progress,
    CallControl* control) const {
  grpc::ClientContext context;
  Prepare(&context);
  if (control) control->Attach(&context);
  std::unique_ptr<grpc::ClientReader<v1::ClusterProgress>> reader =
      stub_->Cluster(&context, request);
  v1::ClusterProgress progress;
  v1::ClusterResult result;
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
  if (!status.ok()) return FromRpc(status, "Cluster");
  if (!got_result) return Status::Internal("mlcd-clusterd ended Cluster without a result");
  return result;
}

StatusOr<v1::AssignResult> ClusterdClient::Assign(
    const v1::AssignRequest& request,
    const std::function<void(const v1::AssignProgress&)>& on_progress, CallControl* control) const {
  grpc::ClientContext context;
  Prepare(&context);
  if (control) control->Attach(&context);
  std::unique_ptr<grpc::ClientReader<v1::AssignProgress>> reader = stub_->Assign(&context, request);
  v1::AssignProgress progress;
  v1::AssignResult result;
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
  if (!status.ok()) return FromRpc(status, "Assign");
  if (!got_result) return Status::Internal("mlcd-clusterd ended Assign without a result");
  return result;
}

}  // namespace mlcd::clusterd
