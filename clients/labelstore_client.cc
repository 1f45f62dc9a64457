#include "clients/labelstore_client.h"

#include <algorithm>

#include "clients/write_capability.h"
#include "common/grpc_server.h"
#include "common/security.h"

namespace mlcd::labelstore {

// ---------------------------------------------------------------------------------------
// LabelWriter

LabelWriter::LabelWriter(v1::LabelStore::Stub* stub, std::string name, std::string address,
                         const LabelStoreClientOptions& options)
    : name_(std::move(name)),
      address_(std::move(address)),
      context_(std::make_unique<grpc::ClientContext>()) {
  if (options.stream_timeout.count() > 0)
    context_->set_deadline(DeadlineIn(options.stream_timeout));
  context_->set_wait_for_ready(options.wait_for_ready);
  AttachActingFor(options.acting_for, context_.get());
  if (!options.write_capability.empty())
    context_->AddMetadata(kWriteCapabilityHeader, options.write_capability);
  stream_ = stub->WriteLabels(context_.get(), &response_);
}

LabelWriter::~LabelWriter() {
  if (!finished_ && context_) context_->TryCancel();
}

Status LabelWriter::StreamBroken() {
  // The server ended the call (a rejected message, an unknown set, a dead server): its status
  // is what Finish() reports.
  broken_ = true;
  auto result = Finish();
  return result.ok() ? Status::Internal("WriteLabels stream to " + address_ + " closed early")
                     : result.status();
}

Status LabelWriter::Write(const uint64_t* ids, size_t n, const int32_t* labels, size_t num_labels,
                          const float* scores, size_t num_scores) {
  if (finished_) {
    return final_status_.ok() ? Status::FailedPrecondition("LabelWriter::Write after Finish()")
                              : final_status_;
  }
  request_.Clear();
  if (messages_sent_ == 0) request_.set_name(name_);
  request_.mutable_sample_ids()->Add(ids, ids + n);
  request_.mutable_labels()->Add(labels, labels + num_labels);
  if (scores != nullptr && num_scores > 0)
    request_.mutable_scores()->Add(scores, scores + num_scores);
  if (!stream_->Write(request_)) return StreamBroken();
  ++messages_sent_;
  rows_sent_ += n;
  return Status::Ok();
}

Status LabelWriter::Write(const std::vector<uint64_t>& ids, const std::vector<int32_t>& labels,
                          const std::vector<float>& scores) {
  return Write(ids.data(), ids.size(), labels.data(), labels.size(),
               scores.empty() ? nullptr : scores.data(), scores.size());
}

Status LabelWriter::WriteRows(const uint64_t* ids, size_t n, int32_t labels_per_sample,
                              const int32_t* labels, const float* scores, size_t rows_per_message) {
  if (labels_per_sample < 1) {
    return Status::InvalidArgument("WriteRows needs labels_per_sample >= 1, got " +
                                   std::to_string(labels_per_sample));
  }
  const size_t l = static_cast<size_t>(labels_per_sample);
  size_t step = MaxRowsPerMessage(labels_per_sample);
  if (rows_per_message > 0) step = std::min(step, rows_per_message);
  if (n == 0) return Write(ids, 0, labels, 0, scores, 0);  // the server names the empty batch
  for (size_t begin = 0; begin < n; begin += step) {
    size_t count = std::min(step, n - begin);
    MLCD_RETURN_IF_ERROR(Write(ids + begin, count, labels + begin * l, count * l,
                               scores ? scores + begin * l : nullptr, scores ? count * l : 0));
  }
  return Status::Ok();
}

StatusOr<v1::WriteLabelsResponse> LabelWriter::Finish() {
  if (!finished_) {
    finished_ = true;
    if (!broken_) stream_->WritesDone();
    grpc::Status status = stream_->Finish();
    final_status_ = FromGrpcStatus(status);
    if (!final_status_.ok()) {
      if (final_status_.code() == StatusCode::kUnavailable ||
          final_status_.code() == StatusCode::kDeadlineExceeded) {
        final_status_ = final_status_.WithContext("WriteLabels to the label store at " + address_);
      }
    }
  }
  if (!final_status_.ok()) return final_status_;
  return response_;
}

// ---------------------------------------------------------------------------------------
// LabelStoreClient

namespace {

// MakeChannel's settings, plus: no transparent retries. The store's calls are not retried by
// gRPC anyway (no retry policy), but with retries enabled every call also pays for the retry
// filter, which keeps a copy of each request message.
std::shared_ptr<grpc::Channel> MakeLabelStoreChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  return CreateSecureChannel(address, args);
}

}  // namespace

LabelStoreClient::LabelStoreClient(const std::string& address, LabelStoreClientOptions options)
    : LabelStoreClient(MakeLabelStoreChannel(address), address, options) {}

LabelStoreClient::LabelStoreClient(std::shared_ptr<grpc::Channel> channel,
                                   const std::string& address, LabelStoreClientOptions options)
    : address_(address),
      options_(options),
      channel_(std::move(channel)),
      stub_(v1::LabelStore::NewStub(channel_)) {}

Status LabelStoreClient::WaitUntilReachable(std::chrono::milliseconds timeout) const {
  return WaitForChannel(channel_, "the label store", address_, timeout);
}

void LabelStoreClient::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(DeadlineIn(options_.timeout));
  context->set_wait_for_ready(options_.wait_for_ready);
  AttachActingFor(options_.acting_for, context);
}

Status LabelStoreClient::FromRpc(const grpc::Status& status, const char* method) const {
  Status s = FromGrpcStatus(status);
  if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) {
    return s.WithContext(
        std::string(method) + " to the label store at " + address_ +
        " (is mlcd-labelstore running? set the address with --labelstore or MLCD_LABELSTORE)");
  }
  return s;
}

StatusOr<v1::LabelSetInfo> LabelStoreClient::CreateLabelSet(const LabelSetSpec& spec) const {
  v1::CreateLabelSetRequest request;
  request.set_name(spec.name);
  request.set_num_classes(spec.num_classes);
  request.set_labels_per_sample(spec.labels_per_sample);
  request.set_with_scores(spec.with_scores);
  for (const auto& [key, value] : spec.metadata) (*request.mutable_metadata())[key] = value;
  grpc::ClientContext context;
  Prepare(&context);
  v1::LabelSetInfo info;
  grpc::Status status = stub_->CreateLabelSet(&context, request, &info);
  if (!status.ok()) return FromRpc(status, "CreateLabelSet");
  return info;
}

std::unique_ptr<LabelWriter> LabelStoreClient::OpenWriter(const std::string& name) const {
  return std::unique_ptr<LabelWriter>(new LabelWriter(stub_.get(), name, address_, options_));
}

StatusOr<v1::WriteLabelsResponse> LabelStoreClient::WriteLabels(
    const std::string& name, const uint64_t* ids, size_t n, int32_t labels_per_sample,
    const int32_t* labels, const float* scores, size_t rows_per_message) const {
  auto writer = OpenWriter(name);
  Status status = writer->WriteRows(ids, n, labels_per_sample, labels, scores, rows_per_message);
  if (!status.ok()) return status;
  return writer->Finish();
}

StatusOr<WriteDelegation> LabelStoreClient::DelegateWrites(const std::string& name) const {
  v1::DelegateWritesRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  Prepare(&context);
  v1::DelegateWritesResponse response;
  grpc::Status status = stub_->DelegateWrites(&context, request, &response);
  if (!status.ok()) return FromRpc(status, "DelegateWrites");
  return WriteDelegation{response.name(), response.incarnation(), response.delegation_key()};
}

StatusOr<v1::LabelSetInfo> LabelStoreClient::Seal(const std::string& name,
                                                  bool require_open) const {
  v1::SealLabelSetRequest request;
  request.set_name(name);
  request.set_require_open(require_open);
  grpc::ClientContext context;
  Prepare(&context);
  v1::LabelSetInfo info;
  grpc::Status status = stub_->SealLabelSet(&context, request, &info);
  if (!status.ok()) return FromRpc(status, "SealLabelSet");
  return info;
}

StatusOr<v1::LabelSetInfo> LabelStoreClient::Describe(const std::string& name) const {
  v1::DescribeLabelSetRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  Prepare(&context);
  v1::LabelSetInfo info;
  grpc::Status status = stub_->DescribeLabelSet(&context, request, &info);
  if (!status.ok()) return FromRpc(status, "DescribeLabelSet");
  return info;
}

StatusOr<std::vector<v1::LabelSetInfo>> LabelStoreClient::List(
    const std::string& name_prefix) const {
  std::vector<v1::LabelSetInfo> sets;
  v1::ListLabelSetsRequest request;
  request.set_name_prefix(name_prefix);
  request.set_page_size(1000);
  while (true) {
    grpc::ClientContext context;
    Prepare(&context);
    v1::ListLabelSetsResponse response;
    grpc::Status status = stub_->ListLabelSets(&context, request, &response);
    if (!status.ok()) return FromRpc(status, "ListLabelSets");
    for (auto& info : *response.mutable_label_sets()) sets.push_back(std::move(info));
    if (response.next_page_token().empty()) break;
    request.set_page_token(response.next_page_token());
  }
  return sets;
}

StatusOr<v1::DeleteLabelSetResponse> LabelStoreClient::Delete(const std::string& name,
                                                              bool allow_missing) const {
  v1::DeleteLabelSetRequest request;
  request.set_name(name);
  request.set_allow_missing(allow_missing);
  grpc::ClientContext context;
  Prepare(&context);
  v1::DeleteLabelSetResponse response;
  grpc::Status status = stub_->DeleteLabelSet(&context, request, &response);
  if (!status.ok()) return FromRpc(status, "DeleteLabelSet");
  return response;
}

Status LabelStoreClient::GetChunk(const std::string& name, const uint64_t* ids, size_t n,
                                  bool with_scores, size_t offset, LabelBatch* out) const {
  v1::GetLabelsRequest request;
  request.set_name(name);
  request.set_with_scores(with_scores);
  request.mutable_sample_ids()->Add(ids, ids + n);
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetLabelsResponse response;
  grpc::Status status = stub_->GetLabels(&context, request, &response);
  if (!status.ok()) return FromRpc(status, "GetLabels");
  const int32_t l = response.labels_per_sample();
  if (l < 1 || static_cast<size_t>(response.labels_size()) != n * static_cast<size_t>(l) ||
      (with_scores && response.scores_size() != response.labels_size()) ||
      response.missing_indices_size() != response.missing_ids_size()) {
    return Status::Internal("malformed GetLabels response from " + address_ + ": " +
                            std::to_string(response.labels_size()) + " labels for " +
                            std::to_string(n) + " ids with l = " + std::to_string(l));
  }
  if (offset == 0) {
    out->labels_per_sample = l;
    out->labels.assign(response.labels().begin(), response.labels().end());
    if (with_scores) out->scores.assign(response.scores().begin(), response.scores().end());
  } else {
    if (l != out->labels_per_sample) {
      return Status::Internal("label set '" + name + "' changed shape between GetLabels chunks");
    }
    out->labels.insert(out->labels.end(), response.labels().begin(), response.labels().end());
    if (with_scores)
      out->scores.insert(out->scores.end(), response.scores().begin(), response.scores().end());
  }
  for (int i = 0; i < response.missing_indices_size(); ++i) {
    out->missing_indices.push_back(static_cast<uint32_t>(offset + response.missing_indices(i)));
    out->missing_ids.push_back(response.missing_ids(i));
  }
  return Status::Ok();
}

Status LabelStoreClient::GetLabels(const std::string& name, const uint64_t* ids, size_t n,
                                   bool with_scores, LabelBatch* out) const {
  out->Clear();
  if (n == 0)
    return GetChunk(name, ids, 0, with_scores, 0, out);  // the server names the empty batch
  // The chunk size must also respect n * l <= kMaxValuesPerMessage; l is unknown until the
  // first answer, so the first chunk is sized for the largest l and later ones for the real l.
  size_t chunk = std::min(kMaxIdsPerRead, kMaxValuesPerMessage / kMaxLabelsPerSample);
  for (size_t begin = 0; begin < n;) {
    size_t count = std::min(chunk, n - begin);
    MLCD_RETURN_IF_ERROR(GetChunk(name, ids + begin, count, with_scores, begin, out));
    begin += count;
    chunk = std::min(kMaxIdsPerRead,
                     kMaxValuesPerMessage / static_cast<size_t>(out->labels_per_sample));
  }
  return Status::Ok();
}

Status LabelStoreClient::GetLabels(const std::string& name, const int64_t* ids, size_t n,
                                   bool with_scores, LabelBatch* out) const {
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0) {
      out->Clear();
      return Status::InvalidArgument("sample id " + std::to_string(ids[i]) + " at position " +
                                     std::to_string(i) +
                                     " is negative; sample ids are row indices >= 0");
    }
  }
  return GetLabels(name, reinterpret_cast<const uint64_t*>(ids), n, with_scores, out);
}

StatusOr<LabelBatch> LabelStoreClient::GetLabels(const std::string& name,
                                                 const std::vector<uint64_t>& ids,
                                                 bool with_scores) const {
  LabelBatch batch;
  MLCD_RETURN_IF_ERROR(GetLabels(name, ids.data(), ids.size(), with_scores, &batch));
  return batch;
}

}  // namespace mlcd::labelstore
