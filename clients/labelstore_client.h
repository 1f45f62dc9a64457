// C++ client of mlcd-labelstore (library mlcd_labelstore_client in clients/: gRPC + protobuf,
// no RocksDB; depends on proto/ and common/ only). Namespace mlcd::labelstore: the client
// speaks the label store's wire contract (proto/mlcd/v1/labelstore.proto); its limits and
// request checks are clients/labelstore_limits.h, the rows it reads clients/label_batch.h.
//
//   mlcd::labelstore::LabelStoreClient client("127.0.0.1:7610");
//   LabelSetSpec spec;
//   spec.name = "job/abc/r0";
//   spec.num_classes = 1000;
//   spec.labels_per_sample = 8;
//   MLCD_ASSIGN_OR_RETURN(auto info, client.CreateLabelSet(spec));
//   auto writer = client.OpenWriter(spec.name);
//   MLCD_RETURN_IF_ERROR(writer->Write(ids, n, labels));     // one stream message per call
//   MLCD_ASSIGN_OR_RETURN(auto written, writer->Finish());  // durable once this is OK
//   MLCD_RETURN_IF_ERROR(client.Seal(spec.name).status());
//   LabelBatch batch;                                        // reuse across steps
//   MLCD_RETURN_IF_ERROR(client.GetLabels(spec.name, ids, n, /*with_scores=*/false, &batch));
//
// Every call returns the server's status code and message unchanged (NOT_FOUND for an
// unknown set, FAILED_PRECONDITION for writes to a sealed set, INVALID_ARGUMENT for bad
// input; see proto/mlcd/v1/labelstore.proto), or UNAVAILABLE / DEADLINE_EXCEEDED naming the
// address when the service cannot be reached. A LabelStoreClient is thread-safe; a
// LabelWriter is used by one thread at a time.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "clients/label_batch.h"
#include "clients/labelstore_limits.h"
#include "common/acting_for.h"
#include "common/status.h"
#include "mlcd/v1/labelstore.grpc.pb.h"

namespace mlcd::labelstore {

struct LabelStoreClientOptions {
  // Deadline of each unary call (and of each GetLabels chunk).
  std::chrono::milliseconds timeout{30000};
  // Deadline of a whole WriteLabels stream, from OpenWriter to Finish (0 = none).
  std::chrono::milliseconds stream_timeout{0};
  // When true, calls wait (up to their deadline) for an unreachable server to come up
  // instead of failing at once with UNAVAILABLE.
  bool wait_for_ready = false;
  // Every call acts for this identity (common/acting_for.h): a service writing a user's or a
  // job's label set (honoured only from a service). Empty = the caller acts as itself.
  ActingFor acting_for;
  // WriteLabels streams carry this write capability (clients/write_capability.h; a gang
  // rank's Assignment.label_write_capability): the store then lets the stream write the set
  // the capability was issued for, and nothing else. Empty = write by the caller's identity.
  std::string write_capability;
};

// An OPEN set's delegation (LabelStore.DelegateWrites): what its owner mints write
// capabilities with (MintWriteCapability).
struct WriteDelegation {
  std::string name;
  uint64_t incarnation = 0;
  std::string key;
};

// What CreateLabelSet needs (fields as in v1::CreateLabelSetRequest).
struct LabelSetSpec {
  std::string name;               // [A-Za-z0-9._/-]{1,200}, e.g. "job/abc/r0"
  int32_t num_classes = 0;        // k: labels are in [0, k)
  int32_t labels_per_sample = 0;  // l: 1 <= l <= min(k, kMaxLabelsPerSample)
  bool with_scores = false;       // rows carry one float score per label
  std::map<std::string, std::string> metadata;
};

// One WriteLabels client stream. Each Write() is one message, validated and committed
// atomically by the server (a rejected message changes nothing). The rows are acknowledged,
// and durable, only when Finish() returns OK. After a failed Write() the stream is over:
// Finish() returns the server's reason (e.g. "message 3: label 1200 ... outside [0, 1000)").
class LabelWriter {
 public:
  ~LabelWriter();  // cancels the stream when Finish() was not called
  LabelWriter(const LabelWriter&) = delete;
  LabelWriter& operator=(const LabelWriter&) = delete;

  // Sends n rows: ids[n], labels[n * l] row-major, scores[n * l] or nullptr (for a set
  // without scores). n must be at most MaxRowsPerMessage(l) (see WriteRows to split).
  Status Write(const uint64_t* ids, size_t n, const int32_t* labels, size_t num_labels,
               const float* scores = nullptr, size_t num_scores = 0);
  Status Write(const std::vector<uint64_t>& ids, const std::vector<int32_t>& labels,
               const std::vector<float>& scores = {});
  // Sends n rows as messages of at most `rows_per_message` rows (0 = the largest allowed
  // for l), so any n can be written; l is needed to cut the label matrix.
  Status WriteRows(const uint64_t* ids, size_t n, int32_t labels_per_sample, const int32_t* labels,
                   const float* scores = nullptr, size_t rows_per_message = 0);

  // Closes the stream and waits for the server: OK means every row written is durable.
  StatusOr<v1::WriteLabelsResponse> Finish();

  size_t messages_sent() const { return messages_sent_; }
  size_t rows_sent() const { return rows_sent_; }

 private:
  friend class LabelStoreClient;
  LabelWriter(v1::LabelStore::Stub* stub, std::string name, std::string address,
              const LabelStoreClientOptions& options);
  Status StreamBroken();

  std::string name_;
  std::string address_;
  std::unique_ptr<grpc::ClientContext> context_;
  v1::WriteLabelsResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::WriteLabelsRequest>> stream_;
  v1::WriteLabelsRequest request_;
  Status final_status_;
  bool finished_ = false;
  bool broken_ = false;
  size_t messages_sent_ = 0;
  size_t rows_sent_ = 0;
};

class LabelStoreClient {
 public:
  // Connects lazily to `address` (host:port).
  explicit LabelStoreClient(const std::string& address, LabelStoreClientOptions options = {});
  // Uses an existing channel; `address` only names it in error messages.
  LabelStoreClient(std::shared_ptr<grpc::Channel> channel, const std::string& address,
                   LabelStoreClientOptions options = {});

  const std::string& address() const { return address_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Waits until the channel is connected; UNAVAILABLE naming the address otherwise.
  Status WaitUntilReachable(std::chrono::milliseconds timeout) const;

  StatusOr<v1::LabelSetInfo> CreateLabelSet(const LabelSetSpec& spec) const;

  // Opens a WriteLabels stream for the OPEN set `name` (errors such as NOT_FOUND surface at
  // the first Write() or at Finish()).
  std::unique_ptr<LabelWriter> OpenWriter(const std::string& name) const;

  // Convenience: one stream carrying all n rows (split into messages as needed), finished.
  StatusOr<v1::WriteLabelsResponse> WriteLabels(const std::string& name, const uint64_t* ids,
                                                size_t n, int32_t labels_per_sample,
                                                const int32_t* labels,
                                                const float* scores = nullptr,
                                                size_t rows_per_message = 0) const;

  // The delegation key of the OPEN set `name`, for its owner (or whom a service acts for).
  // PERMISSION_DENIED for a caller who may not write it, FAILED_PRECONDITION once sealed.
  StatusOr<WriteDelegation> DelegateWrites(const std::string& name) const;

  // Makes the set immutable. Idempotent unless require_open (then FAILED_PRECONDITION when
  // already sealed).
  StatusOr<v1::LabelSetInfo> Seal(const std::string& name, bool require_open = false) const;
  StatusOr<v1::LabelSetInfo> Describe(const std::string& name) const;
  // Every set whose name starts with `name_prefix` (pages followed internally), by name.
  StatusOr<std::vector<v1::LabelSetInfo>> List(const std::string& name_prefix = "") const;
  // Deletes the set and its rows; with allow_missing an unknown set is not an error.
  StatusOr<v1::DeleteLabelSetResponse> Delete(const std::string& name,
                                              bool allow_missing = false) const;

  // Reads the rows of ids[0..n) into *out (cleared first). Any n >= 1: reads over
  // kMaxIdsPerRead ids are split into several requests. with_scores on a set without scores
  // is FAILED_PRECONDITION.
  Status GetLabels(const std::string& name, const uint64_t* ids, size_t n, bool with_scores,
                   LabelBatch* out) const;
  // The same for signed ids (INVALID_ARGUMENT for a negative id).
  Status GetLabels(const std::string& name, const int64_t* ids, size_t n, bool with_scores,
                   LabelBatch* out) const;
  StatusOr<LabelBatch> GetLabels(const std::string& name, const std::vector<uint64_t>& ids,
                                 bool with_scores = false) const;

 private:
  void Prepare(grpc::ClientContext* context) const;
  Status FromRpc(const grpc::Status& status, const char* method) const;
  Status GetChunk(const std::string& name, const uint64_t* ids, size_t n, bool with_scores,
                  size_t offset, LabelBatch* out) const;

  std::string address_;
  LabelStoreClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LabelStore::Stub> stub_;
};

}  // namespace mlcd::labelstore
