#include "coordinator/service.h"

#include "common/security.h"
#include "coordinator/caller_checks.h"

namespace mlcd::coordinator {
namespace {

template <typename T>
grpc::Status Reply(RpcTimer& timer, StatusOr<T> result, T* response) {
  if (result.ok()) *response = std::move(result).value();
  return ToGrpcStatus(timer.Done(result.status()));
}

}  // namespace

// Every handler first checks its caller against the access table (common/access_policy.cc).
#define MLCD_AUTHORIZE(method)                                                              \
  Principal caller;                                                                         \
  if (grpc::Status auth = AuthorizeCall(*context, "/mlcd.v1.Coordinator/" method, &caller); \
      !auth.ok())                                                                           \
  return auth

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* request, v1::Job* response) {
  MLCD_AUTHORIZE("SubmitJob");
  RpcTimer timer(&metrics_->rpc(), "SubmitJob");
  return Reply(timer, manager_->SubmitJob(*request, caller.identity, caller.role == Role::kAdmin),
               response);
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request, v1::Job* response) {
  MLCD_AUTHORIZE("GetJob");
  RpcTimer timer(&metrics_->rpc(), "GetJob");
  StatusOr<v1::Job> job = manager_->GetJob(*request);
  if (job.ok()) HideOthersRequestId(caller.identity, caller.role == Role::kAdmin, &*job);
  return Reply(timer, std::move(job), response);
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context,
                                          const v1::ListJobsRequest* request,
                                          v1::ListJobsResponse* response) {
  MLCD_AUTHORIZE("ListJobs");
  RpcTimer timer(&metrics_->rpc(), "ListJobs");
  StatusOr<v1::ListJobsResponse> list = manager_->ListJobs(*request);
  if (list.ok()) {
    for (v1::Job& job : *list->mutable_jobs())
      HideOthersRequestId(caller.identity, caller.role == Role::kAdmin, &job);
  }
  return Reply(timer, std::move(list), response);
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* request, v1::Job* response) {
  MLCD_AUTHORIZE("CancelJob");
  RpcTimer timer(&metrics_->rpc(), "CancelJob");
  return Reply(timer, manager_->CancelJob(*request, caller.identity, caller.role == Role::kAdmin),
               response);
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const v1::WatchJobRequest* request,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  MLCD_AUTHORIZE("WatchJob");
  RpcTimer timer(&metrics_->rpc(), "WatchJob");
  Status s = manager_->WatchJob(
      *request, caller.identity,
      [writer, &caller](const v1::JobEvent& event) {
        const bool admin = caller.role == Role::kAdmin;
        if (!HidesRequestId(event.job(), caller.identity, admin)) return writer->Write(event);
        v1::JobEvent shown = event;
        HideOthersRequestId(caller.identity, admin, shown.mutable_job());
        return writer->Write(shown);
      },
      [context] { return context->IsCancelled(); });
  return ToGrpcStatus(timer.Done(s));
}

grpc::Status CoordinatorService::RegisterWorker(grpc::ServerContext* context,
                                                const v1::RegisterWorkerRequest* request,
                                                v1::RegisterWorkerResponse* response) {
  MLCD_AUTHORIZE("RegisterWorker");
  RpcTimer timer(&metrics_->rpc(), "RegisterWorker");
  return Reply(timer, manager_->RegisterWorker(*request, caller.identity), response);
}

grpc::Status CoordinatorService::GetAssignment(grpc::ServerContext* context,
                                               const v1::GetAssignmentRequest* request,
                                               v1::Assignment* response) {
  MLCD_AUTHORIZE("GetAssignment");
  RpcTimer timer(&metrics_->rpc(), "GetAssignment");
  return Reply(timer,
               manager_->GetAssignment(*request, caller.identity,
                                       [context] { return context->IsCancelled(); }),
               response);
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* context,
                                           const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse* response) {
  MLCD_AUTHORIZE("Heartbeat");
  RpcTimer timer(&metrics_->rpc(), "Heartbeat");
  return Reply(timer, manager_->Heartbeat(*request, caller.identity), response);
}

grpc::Status CoordinatorService::ReportAssignment(grpc::ServerContext* context,
                                                  const v1::ReportAssignmentRequest* request,
                                                  v1::ReportAssignmentResponse* response) {
  MLCD_AUTHORIZE("ReportAssignment");
  RpcTimer timer(&metrics_->rpc(), "ReportAssignment");
  return Reply(timer, manager_->ReportAssignment(*request, caller.identity), response);
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* context,
                                             const v1::ListWorkersRequest* request,
                                             v1::ListWorkersResponse* response) {
  MLCD_AUTHORIZE("ListWorkers");
  RpcTimer timer(&metrics_->rpc(), "ListWorkers");
  return Reply(timer, manager_->ListWorkers(*request), response);
}

grpc::Status CoordinatorService::DeregisterWorker(grpc::ServerContext* context,
                                                  const v1::DeregisterWorkerRequest* request,
                                                  v1::DeregisterWorkerResponse* response) {
  MLCD_AUTHORIZE("DeregisterWorker");
  RpcTimer timer(&metrics_->rpc(), "DeregisterWorker");
  return Reply(timer, manager_->DeregisterWorker(*request, caller.identity), response);
}

grpc::Status CoordinatorService::DrainWorker(grpc::ServerContext* context,
                                             const v1::DrainWorkerRequest* request,
                                             v1::DrainWorkerResponse* response) {
  MLCD_AUTHORIZE("DrainWorker");
  RpcTimer timer(&metrics_->rpc(), "DrainWorker");
  return Reply(timer, manager_->DrainWorker(*request), response);
}

grpc::Status CoordinatorService::BackupState(grpc::ServerContext* context,
                                             const v1::BackupStateRequest*,
                                             grpc::ServerWriter<v1::BackupChunk>* writer) {
  MLCD_AUTHORIZE("BackupState");
  RpcTimer timer(&metrics_->rpc(), "BackupState");
  Status s = manager_->BackupState([context, writer](const v1::BackupChunk& chunk) {
    return !context->IsCancelled() && writer->Write(chunk);
  });
  return ToGrpcStatus(timer.Done(s));
}

#undef MLCD_AUTHORIZE

}  // namespace mlcd::coordinator
