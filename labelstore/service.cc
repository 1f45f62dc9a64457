#include "labelstore/service.h"

#include "clients/write_capability.h"
#include "common/acting_for.h"
#include "common/security.h"
#include "labelstore/ownership.h"

namespace mlcd::labelstore {

LabelStoreService::LabelStoreService(LabelStorage* storage, prometheus::Registry& registry)
    : storage_(storage),
      grants_(storage->capability_secret()),
      rpc_metrics_(registry, "labelstore"),
      ids_read_(prometheus::BuildCounter()
                    .Name("mlcd_labelstore_ids_read_total")
                    .Help("Sample ids asked for by successful GetLabels calls")
                    .Register(registry)
                    .Add({})),
      ids_missing_(prometheus::BuildCounter()
                       .Name("mlcd_labelstore_ids_missing_total")
                       .Help("Sample ids asked for by GetLabels that had no row")
                       .Register(registry)
                       .Add({})),
      rows_written_(prometheus::BuildCounter()
                        .Name("mlcd_labelstore_rows_written_total")
                        .Help("Rows committed by WriteLabels")
                        .Register(registry)
                        .Add({})),
      get_batch_ids_(prometheus::BuildHistogram()
                         .Name("mlcd_labelstore_get_batch_ids")
                         .Help("Ids per GetLabels request")
                         .Register(registry)
                         .Add({}, prometheus::Histogram::BucketBoundaries{1, 8, 64, 256, 1024, 4096,
                                                                          16384, 65536})),
      label_sets_(prometheus::BuildGauge()
                      .Name("mlcd_labelstore_label_sets")
                      .Help("Label sets stored")
                      .Register(registry)
                      .Add({})) {
  UpdateSetGauge();
}

// Every handler first checks its caller against the access table (common/access_policy.cc).
#define MLCD_AUTHORIZE(method)                                                             \
  Principal caller;                                                                        \
  if (grpc::Status auth = AuthorizeCall(*context, "/mlcd.v1.LabelStore/" method, &caller); \
      !auth.ok())                                                                          \
  return auth

// The principal a changing call acts for (the caller, or whom a service names).
#define MLCD_ACTING_PRINCIPAL(actor)                                  \
  StatusOr<Principal> actor##_or = ActingPrincipal(*context, caller); \
  if (!actor##_or.ok()) return ToGrpcStatus(actor##_or.status());     \
  const Principal& actor = *actor##_or

namespace {

// The storage's ChangeCheck for `actor` making `change` to set `name`.
LabelStorage::ChangeCheck MayChange(const std::string& name, const Principal& actor,
                                    SetChange change) {
  return [&name, &actor, change](const std::string& owner, uint64_t) {
    return CheckChange(name, owner, actor, change);
  };
}

// The write capability a call carries (kWriteCapabilityHeader), or null.
const std::string* PresentedCapability(const grpc::ServerContext& context, std::string* storage) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kWriteCapabilityHeader);
  if (it == metadata.end()) return nullptr;
  storage->assign(it->second.data(), it->second.size());
  return storage;
}

}  // namespace

void LabelStoreService::UpdateSetGauge() {
  label_sets_.Set(static_cast<double>(storage_->num_sets()));
}

grpc::Status LabelStoreService::CreateLabelSet(grpc::ServerContext* context,
                                               const v1::CreateLabelSetRequest* request,
                                               v1::LabelSetInfo* response) {
  MLCD_AUTHORIZE("CreateLabelSet");
  MLCD_ACTING_PRINCIPAL(actor);
  RpcTimer timer(&rpc_metrics_, "CreateLabelSet");
  if (Status allowed = CheckCreate(request->name(), actor); !allowed.ok())
    return ToGrpcStatus(timer.Done(allowed));
  auto result = storage_->Create(*request, OwnerOfNewSet(request->name(), actor));
  if (result.ok()) {
    *response = std::move(result).value();
    UpdateSetGauge();
  }
  return ToGrpcStatus(timer.Done(result.status()));
}

grpc::Status LabelStoreService::WriteLabels(grpc::ServerContext* context,
                                            grpc::ServerReader<v1::WriteLabelsRequest>* reader,
                                            v1::WriteLabelsResponse* response) {
  MLCD_AUTHORIZE("WriteLabels");
  MLCD_ACTING_PRINCIPAL(actor);
  RpcTimer timer(&rpc_metrics_, "WriteLabels");
  std::string capability_text;
  const std::string* capability = PresentedCapability(*context, &capability_text);
  v1::WriteLabelsRequest message;
  std::string name;
  uint64_t messages = 0, rows = 0, num_samples = 0;
  uint64_t set_id = 0;  // the incarnation of the set this stream writes (after message 0)
  Status status;
  while (reader->Read(&message)) {
    const std::string where = "WriteLabels message " + std::to_string(messages);
    if (messages == 0) {
      if (message.name().empty()) {
        status = Status::InvalidArgument(
            where + ": the first message of a WriteLabels stream must name the label set");
        break;
      }
      name = message.name();
    } else if (!message.name().empty() && message.name() != name) {
      status =
          Status::InvalidArgument(where + " names label set '" + message.name() +
                                  "' but the stream writes '" + name + "'; use one stream per set");
      break;
    }
    // The right to write is checked on the first message; later ones are bound to that
    // set_id. A capability, when the call carries one, is the only right it writes by.
    LabelStorage::ChangeCheck check;
    if (set_id == 0 && capability) {
      check = [&](const std::string&, uint64_t incarnation) {
        return grants_.Check(*capability, name, incarnation);
      };
    } else if (set_id == 0) {
      check = MayChange(name, actor, SetChange::kWrite);
    }
    auto result = storage_->Write(name, message, set_id, check);
    if (!result.ok()) {
      status = result.status().WithContext(
          where + (messages > 0 ? " (earlier messages are committed)" : ""));
      break;
    }
    ++messages;
    set_id = result->set_id;
    rows += result->rows_written;
    num_samples = result->num_samples;
    rows_written_.Increment(static_cast<double>(result->rows_written));
  }
  if (status.ok() && context->IsCancelled()) {
    status = Status::Cancelled("WriteLabels cancelled by the client after " +
                               std::to_string(messages) + " messages");
  }
  if (status.ok() && messages == 0) {
    status = Status::InvalidArgument(
        "WriteLabels stream carried no messages; send at least one message naming the set");
  }
  if (messages > 0) {
    // Durable before anything is acknowledged (and committed messages stay durable when a
    // later one is rejected).
    Status sync = storage_->SyncWal();
    if (status.ok()) status = sync;
  }
  if (status.ok()) {
    response->set_name(name);
    response->set_rows_written(rows);
    response->set_messages(messages);
    response->set_num_samples(num_samples);
  }
  return ToGrpcStatus(timer.Done(status));
}

grpc::Status LabelStoreService::DelegateWrites(grpc::ServerContext* context,
                                               const v1::DelegateWritesRequest* request,
                                               v1::DelegateWritesResponse* response) {
  MLCD_AUTHORIZE("DelegateWrites");
  MLCD_ACTING_PRINCIPAL(actor);
  RpcTimer timer(&rpc_metrics_, "DelegateWrites");
  StatusOr<uint64_t> incarnation = storage_->OpenIncarnation(
      request->name(), MayChange(request->name(), actor, SetChange::kWrite));
  if (incarnation.ok()) {
    response->set_name(request->name());
    response->set_incarnation(*incarnation);
    response->set_delegation_key(grants_.DelegationKey(request->name(), *incarnation));
  }
  return ToGrpcStatus(timer.Done(incarnation.status()));
}

grpc::Status LabelStoreService::SealLabelSet(grpc::ServerContext* context,
                                             const v1::SealLabelSetRequest* request,
                                             v1::LabelSetInfo* response) {
  MLCD_AUTHORIZE("SealLabelSet");
  MLCD_ACTING_PRINCIPAL(actor);
  RpcTimer timer(&rpc_metrics_, "SealLabelSet");
  auto result = storage_->Seal(request->name(), request->require_open(),
                               MayChange(request->name(), actor, SetChange::kSeal));
  if (result.ok()) *response = std::move(result).value();
  return ToGrpcStatus(timer.Done(result.status()));
}

grpc::Status LabelStoreService::ListLabelSets(grpc::ServerContext* context,
                                              const v1::ListLabelSetsRequest* request,
                                              v1::ListLabelSetsResponse* response) {
  MLCD_AUTHORIZE("ListLabelSets");
  RpcTimer timer(&rpc_metrics_, "ListLabelSets");
  auto result = storage_->List(*request);
  if (result.ok()) *response = std::move(result).value();
  return ToGrpcStatus(timer.Done(result.status()));
}

grpc::Status LabelStoreService::DescribeLabelSet(grpc::ServerContext* context,
                                                 const v1::DescribeLabelSetRequest* request,
                                                 v1::LabelSetInfo* response) {
  MLCD_AUTHORIZE("DescribeLabelSet");
  RpcTimer timer(&rpc_metrics_, "DescribeLabelSet");
  auto result = storage_->Describe(request->name());
  if (result.ok()) *response = std::move(result).value();
  return ToGrpcStatus(timer.Done(result.status()));
}

grpc::Status LabelStoreService::DeleteLabelSet(grpc::ServerContext* context,
                                               const v1::DeleteLabelSetRequest* request,
                                               v1::DeleteLabelSetResponse* response) {
  MLCD_AUTHORIZE("DeleteLabelSet");
  MLCD_ACTING_PRINCIPAL(actor);
  RpcTimer timer(&rpc_metrics_, "DeleteLabelSet");
  auto result = storage_->Delete(request->name(), request->allow_missing(),
                                 MayChange(request->name(), actor, SetChange::kDelete));
  if (result.ok()) {
    *response = std::move(result).value();
    UpdateSetGauge();
  }
  return ToGrpcStatus(timer.Done(result.status()));
}

grpc::ServerUnaryReactor* LabelStoreService::GetLabels(grpc::CallbackServerContext* context,
                                                       const v1::GetLabelsRequest* request,
                                                       v1::GetLabelsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Principal caller;
  if (grpc::Status auth = AuthorizeCall(*context, "/mlcd.v1.LabelStore/GetLabels", &caller);
      !auth.ok()) {
    reactor->Finish(auth);
    return reactor;
  }
  RpcTimer timer(&rpc_metrics_, "GetLabels");
  const size_t n = static_cast<size_t>(request->sample_ids_size());
  Status status = storage_->GetLabels(request->name(), request->sample_ids().data(), n,
                                      request->with_scores(), response);
  if (status.ok()) {
    ids_read_.Increment(static_cast<double>(n));
    if (response->missing_indices_size() > 0)
      ids_missing_.Increment(response->missing_indices_size());
    get_batch_ids_.Observe(static_cast<double>(n));
  }
  reactor->Finish(ToGrpcStatus(timer.Done(status)));
  return reactor;
}

#undef MLCD_ACTING_PRINCIPAL
#undef MLCD_AUTHORIZE

}  // namespace mlcd::labelstore
