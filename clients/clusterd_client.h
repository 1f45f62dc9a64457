// C++ client of mlcd-clusterd (library mlcd_clusterd_client in clients/: gRPC only, no FAISS;
// depends on proto/ and common/ only), used by mlcdctl and the coordinator. Namespace
// mlcd::clusterd: the client speaks clusterd's wire contract (proto/mlcd/v1/clusterd.proto).
//
//   mlcd::clusterd::ClusterdClient client("127.0.0.1:7620");
//   v1::ClusterRequest req;  req.mutable_features()->add_paths("/data/feats");  req.set_k(1000);
//   req.set_centroids_out("/data/r0/centroids.npy");
//   auto result = client.Cluster(req, [](const v1::ClusterProgress& p) { ... });
//
// The calls block until the job ends and return the final result or the server's status.
// To cancel from another thread, pass a CallControl and call Cancel() on it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/acting_for.h"
#include "common/enums.h"
#include "common/mutex.h"
#include "common/status.h"
#include "mlcd/v1/clusterd.grpc.pb.h"

namespace mlcd::clusterd {

// Cancels a call in flight from any thread (also before it starts: it then fails at once with
// CANCELLED).
class CallControl {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class ClusterdClient;
  void Attach(grpc::ClientContext* context);
  void Detach();
  mutable Mutex mu_;
  grpc::ClientContext* context_ GUARDED_BY(mu_) = nullptr;
  bool cancelled_ GUARDED_BY(mu_) = false;
};

struct ClusterdClientOptions {
  // Deadline of a whole Cluster/Assign call (0 = none: clustering can take hours).
  std::chrono::milliseconds deadline{0};
  // Wait for an unreachable server to come up (until the deadline) instead of failing fast.
  bool wait_for_ready = false;
  // The calls act for this identity (common/acting_for.h; honoured only from a service): the
  // coordinator's phases act for their job. Empty = the caller acts as itself.
  ActingFor acting_for;
};

class ClusterdClient {
 public:
  explicit ClusterdClient(const std::string& address, ClusterdClientOptions options = {});
  const std::string& address() const { return address_; }

  StatusOr<v1::ClusterResult> Cluster(
      const v1::ClusterRequest& request,
      const std::function<void(const v1::ClusterProgress&)>& on_progress = nullptr,
      CallControl* control = nullptr) const;
  StatusOr<v1::AssignResult> Assign(
      const v1::AssignRequest& request,
      const std::function<void(const v1::AssignProgress&)>& on_progress = nullptr,
      CallControl* control = nullptr) const;

 private:
  void Prepare(grpc::ClientContext* context) const;
  Status FromRpc(const grpc::Status& status, const char* method) const;
  // The one server-streaming call (Cluster and Assign): opens the stream with `open`, hands
  // every progress message to `on_progress` and returns the result one of them carries.
  template <typename Progress, typename Result>
  StatusOr<Result> Stream(
      const char* method,
      const std::function<std::unique_ptr<grpc::ClientReader<Progress>>(grpc::ClientContext*)>&
          open,
      const std::function<void(const Progress&)>& on_progress, CallControl* control) const;

  std::string address_;
  ClusterdClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Clusterd::Stub> stub_;
};

// The search method on the wire (mlcd.v1.SearchMethod) and back; UNSPECIFIED reads as exact,
// an unknown number is INVALID_ARGUMENT.
v1::SearchMethod SearchMethodToProto(SearchMethod method);
StatusOr<SearchMethod> SearchMethodFromProto(v1::SearchMethod method);

}  // namespace mlcd::clusterd
