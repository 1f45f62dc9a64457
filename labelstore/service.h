// The gRPC service mlcd.v1.LabelStore over a LabelStorage (one class per service, as in the
// gRPC examples). Maps storage Status values onto gRPC status codes unchanged and records
// Prometheus metrics:
//   mlcd_labelstore_requests_total{method,code}, mlcd_labelstore_request_duration_seconds{method}
//   mlcd_labelstore_ids_read_total, mlcd_labelstore_ids_missing_total,
//   mlcd_labelstore_rows_written_total, mlcd_labelstore_get_batch_ids (histogram),
//   mlcd_labelstore_label_sets (gauge)
#pragma once

#include <prometheus/registry.h>

#include "common/metrics.h"
#include "labelstore/storage.h"
#include "labelstore/write_grants.h"
#include "mlcd/v1/labelstore.grpc.pb.h"

namespace mlcd::labelstore {

// GetLabels, the hot path, uses gRPC's callback API: it runs on the thread that read the
// request, without the sync server's hand-off to a worker thread (fewer wake-ups per call).
// The other methods are ordinary sync handlers.
class LabelStoreService final
    : public v1::LabelStore::WithCallbackMethod_GetLabels<v1::LabelStore::Service> {
 public:
  // `storage` must outlive the service; metrics are registered in `registry`.
  LabelStoreService(LabelStorage* storage, prometheus::Registry& registry);

  grpc::Status CreateLabelSet(grpc::ServerContext* context,
                              const v1::CreateLabelSetRequest* request,
                              v1::LabelSetInfo* response) override;
  // Each message is validated and committed atomically in order; a bad message ends the
  // call with its index in the message ("WriteLabels message 3: ..."), earlier messages stay
  // committed. The WAL is synced before the response, so an OK response means durable.
  // A stream writes the set its first message found: when that set is deleted (and maybe
  // created again under the same name) while the stream is open, the stream ends ABORTED
  // and writes nothing into the new set.
  grpc::Status WriteLabels(grpc::ServerContext* context,
                           grpc::ServerReader<v1::WriteLabelsRequest>* reader,
                           v1::WriteLabelsResponse* response) override;
  // The delegation key of an OPEN set, for whoever may write it by ownership
  // (labelstore/write_grants.h).
  grpc::Status DelegateWrites(grpc::ServerContext* context,
                              const v1::DelegateWritesRequest* request,
                              v1::DelegateWritesResponse* response) override;
  grpc::Status SealLabelSet(grpc::ServerContext* context, const v1::SealLabelSetRequest* request,
                            v1::LabelSetInfo* response) override;
  grpc::Status ListLabelSets(grpc::ServerContext* context, const v1::ListLabelSetsRequest* request,
                             v1::ListLabelSetsResponse* response) override;
  grpc::Status DescribeLabelSet(grpc::ServerContext* context,
                                const v1::DescribeLabelSetRequest* request,
                                v1::LabelSetInfo* response) override;
  grpc::Status DeleteLabelSet(grpc::ServerContext* context,
                              const v1::DeleteLabelSetRequest* request,
                              v1::DeleteLabelSetResponse* response) override;
  grpc::ServerUnaryReactor* GetLabels(grpc::CallbackServerContext* context,
                                      const v1::GetLabelsRequest* request,
                                      v1::GetLabelsResponse* response) override;

 private:
  void UpdateSetGauge();

  LabelStorage* storage_;
  const WriteGrants grants_;
  RpcMetrics rpc_metrics_;
  prometheus::Counter& ids_read_;
  prometheus::Counter& ids_missing_;
  prometheus::Counter& rows_written_;
  prometheus::Histogram& get_batch_ids_;
  prometheus::Gauge& label_sets_;
};

}  // namespace mlcd::labelstore
