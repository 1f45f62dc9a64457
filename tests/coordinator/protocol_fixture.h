// The worker side of mlcd.v1.Coordinator spoken by a test (ProtocolWorker) and the fixture
// that starts the real services on loopback (CoordinatorProtocolTest); shared by
// protocol_test.cc and protocol_validation_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/grpc_server.h"
#include "common/net.h"
#include "tests/coordinator/harness.h"
#include "tests/coordinator/services_fixture.h"

namespace mlcd::testing {

// One simulated worker slot speaking the protocol.
class ProtocolWorker {
 public:
  ProtocolWorker(TestCluster* cluster, std::string name,
                 std::vector<v1::AssignmentKind> kinds = {v1::ASSIGNMENT_KIND_TRAIN})
      : cluster_(cluster), name_(std::move(name)), kinds_(std::move(kinds)) {}

  Status Register() {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    v1::RegisterWorkerRequest request;
    request.set_name(name_);
    request.set_host("127.0.0.1");
    for (auto k : kinds_) request.add_kinds(k);
    v1::RegisterWorkerResponse response;
    MLCD_RETURN_IF_ERROR(
        FromGrpcStatus(cluster_->stub()->RegisterWorker(&context, request, &response)));
    // One immediate poll offers a rendezvous port, as an agent does right after registering:
    // only workers that have polled are put into gangs.
    return Poll(0).status();
  }

  // One long poll. Returns the assignment (kind NONE when there was none).
  StatusOr<v1::Assignment> Poll(int wait_seconds, int port = 0) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(wait_seconds + 10)));
    v1::GetAssignmentRequest request;
    request.set_worker_id(name_);
    request.set_wait_seconds(wait_seconds);
    request.set_rendezvous_port(port > 0 ? port : PickFreePort());
    v1::Assignment a;
    Status s = FromGrpcStatus(cluster_->stub()->GetAssignment(&context, request, &a));
    if (!s.ok()) return s;
    return a;
  }

  // Polls until an assignment arrives.
  StatusOr<v1::Assignment> PollUntilAssigned(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto a = Poll(1);
      if (!a.ok()) return a;
      if (a->kind() != v1::ASSIGNMENT_KIND_NONE) return a;
    }
    return Status::DeadlineExceeded(name_ + " got no assignment in time");
  }

  StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& assignment_id,
                                            const v1::WorkerProgress& progress) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    v1::HeartbeatRequest request;
    request.set_worker_id(name_);
    request.set_assignment_id(assignment_id);
    *request.mutable_progress() = progress;
    v1::HeartbeatResponse response;
    Status s = FromGrpcStatus(cluster_->stub()->Heartbeat(&context, request, &response));
    if (!s.ok()) return s;
    return response;
  }

  Status Report(const std::string& assignment_id, bool succeeded,
                const v1::WorkerProgress& progress, const std::string& message = "") {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    v1::ReportAssignmentRequest request;
    request.set_worker_id(name_);
    request.set_assignment_id(assignment_id);
    request.set_succeeded(succeeded);
    request.set_message(message);
    *request.mutable_progress() = progress;
    v1::ReportAssignmentResponse response;
    return FromGrpcStatus(cluster_->stub()->ReportAssignment(&context, request, &response));
  }

  const std::string& name() const { return name_; }

 private:
  TestCluster* cluster_;
  std::string name_;
  std::vector<v1::AssignmentKind> kinds_;
};

// The checkpoint assignment `a`'s gang writes at the end of `epoch`: inside the checkpoint
// root the assignment names (the coordinator commits no other).
inline std::string CheckpointOf(const v1::Assignment& a, int epoch) {
  return a.checkpoint_dir() + "/" + a.attempt_id() + "-e" + std::to_string(epoch);
}

// Progress of rank 0 of assignment `a` with the checkpoint written at the end of `epoch`
// (0-based).
inline v1::WorkerProgress EpochEnd(int round, int epoch, int64_t steps_per_epoch,
                                   const v1::Assignment& a) {
  v1::WorkerProgress p;
  p.set_round(round);
  p.set_epoch(epoch);
  p.set_step(steps_per_epoch);
  p.set_steps_per_epoch(steps_per_epoch);
  p.set_total_steps((epoch + 1) * steps_per_epoch);
  p.set_job_total_steps(2 * steps_per_epoch);
  p.set_loss(3.5 - epoch);
  p.set_samples_per_second(100);
  p.set_events(10 * (epoch + 1));
  p.set_checkpoint(CheckpointOf(a, epoch));
  p.set_checkpoint_round(round);
  p.set_checkpoint_epoch(epoch);
  p.set_checkpoint_step(steps_per_epoch);
  p.set_checkpoint_global_step((epoch + 1) * steps_per_epoch);
  p.set_checkpoint_epoch_complete(true);
  return p;
}

inline v1::WorkerProgress Running(int64_t global_step) {
  v1::WorkerProgress p;
  p.set_total_steps(global_step);
  p.set_step(global_step % 3);
  p.set_steps_per_epoch(3);
  p.set_events(global_step + 1);
  return p;
}

inline int CountHistory(const v1::Job& job, const std::string& kind) {
  int n = 0;
  for (const auto& h : job.history()) n += h.kind() == kind;
  return n;
}

class CoordinatorProtocolTest : public ServicesTest {
 protected:
  // Submits the tiny spec and waits until it needs workers.
  v1::Job SubmitAndWaitForTraining(const TinyJob& spec) {
    auto job = cluster_->Submit(spec.Yaml());
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    if (!job.ok()) return {};
    auto training =
        cluster_->WaitForState(job->id(), v1::JOB_STATE_TRAINING, std::chrono::seconds(60));
    EXPECT_TRUE(training.ok()) << training.status().ToString();
    if (!training.ok()) return {};
    EXPECT_EQ(training->state(), v1::JOB_STATE_TRAINING) << training->message();
    return *training;
  }
};

}  // namespace mlcd::testing
