// mlcd.v1.Coordinator over gRPC: a thin layer mapping each call onto JobManager and its
// mlcd::Status onto the gRPC status (INVALID_ARGUMENT for bad specs and requests, with every
// problem and its field path; NOT_FOUND for unknown jobs and workers; FAILED_PRECONDITION
// for requests the job's state forbids; ALREADY_EXISTS for a reused request id with another
// spec). Every call is first checked against the caller's token or certificate and the
// access table (AuthorizeCall, common/security.h): UNAUTHENTICATED / PERMISSION_DENIED.
#pragma once

#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "mlcd/v1/coordinator.grpc.pb.h"

namespace mlcd::coordinator {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(JobManager* manager, CoordinatorMetrics* metrics)
      : manager_(manager), metrics_(metrics) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status GetAssignment(grpc::ServerContext* context, const v1::GetAssignmentRequest* request,
                             v1::Assignment* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status ReportAssignment(grpc::ServerContext* context,
                                const v1::ReportAssignmentRequest* request,
                                v1::ReportAssignmentResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status DeregisterWorker(grpc::ServerContext* context,
                                const v1::DeregisterWorkerRequest* request,
                                v1::DeregisterWorkerResponse* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context, const v1::DrainWorkerRequest* request,
                           v1::DrainWorkerResponse* response) override;
  grpc::Status BackupState(grpc::ServerContext* context, const v1::BackupStateRequest* request,
                           grpc::ServerWriter<v1::BackupChunk>* writer) override;

 private:
  JobManager* manager_;
  CoordinatorMetrics* metrics_;
};

}  // namespace mlcd::coordinator
