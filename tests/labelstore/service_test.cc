// The label store service through the real mlcd-labelstore binary on a free loopback port:
// acknowledged writes survive kill -9, every bad input gets its status code, metrics are
// served, SIGTERM shuts down cleanly.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/generic/generic_stub.h>

#include "clients/labelstore_client.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "common/net.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/testing/http.h"
#include "tests/testing/process.h"

namespace mlcd::labelstore {
namespace {

using testing::ChildProcess;
using testing::HttpGet;
using testing::TempDir;

int32_t LabelOf(uint64_t id, int c, int32_t k) {
  return static_cast<int32_t>((id * 2654435761u + static_cast<uint64_t>(c) * 40503u) %
                              static_cast<uint64_t>(k));
}

// Server reflection from the client side. Debian's libgrpc++-dev ships the server plugin but
// neither reflection.proto nor the client helper (ProtoReflectionDescriptorDatabase), so the
// stream is driven through GenericStub, with messages built from the descriptors that
// libgrpc++_reflection (linked through mlcd_common) registers in the generated pool.
// Sends each request (text format of grpc.reflection.v1alpha.ServerReflectionRequest) on one
// ServerReflectionInfo stream and returns the responses, or the reason there are none.
StatusOr<std::vector<std::unique_ptr<google::protobuf::Message>>> AskReflection(
    const std::string& address, const std::vector<std::string>& requests) {
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  const auto* request_type =
      pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionRequest");
  const auto* response_type =
      pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionResponse");
  if (!request_type || !response_type) {
    return Status::FailedPrecondition(
        "the reflection messages are not in the generated pool; "
        "is libgrpc++_reflection linked?");
  }
  auto* factory = google::protobuf::MessageFactory::generated_factory();
  grpc::GenericStub stub(MakeChannel(address));
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  // Each operation gets its own tag and is awaited before the next one starts.
  intptr_t next_tag = 0;
  auto await = [&] {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok && reinterpret_cast<intptr_t>(tag) == next_tag;
  };
  std::vector<std::unique_ptr<google::protobuf::Message>> responses;
  Status result = Status::Ok();
  call->StartCall(reinterpret_cast<void*>(++next_tag));
  if (!await()) result = Status::Unavailable("cannot start the reflection call on " + address);
  for (size_t i = 0; result.ok() && i < requests.size(); ++i) {
    std::unique_ptr<google::protobuf::Message> request(factory->GetPrototype(request_type)->New());
    if (!google::protobuf::TextFormat::ParseFromString(requests[i], request.get())) {
      result = Status::InvalidArgument("bad request text: " + requests[i]);
      break;
    }
    std::string bytes = request->SerializeAsString();
    grpc::Slice slice(bytes);
    grpc::ByteBuffer out(&slice, 1);
    call->Write(out, reinterpret_cast<void*>(++next_tag));
    if (!await())
      result = Status::Unavailable("writing reflection request " + std::to_string(i) + " failed");
    grpc::ByteBuffer in;
    if (result.ok()) call->Read(&in, reinterpret_cast<void*>(++next_tag));
    if (result.ok() && !await())
      result = Status::Unavailable("no reply to reflection request " + std::to_string(i));
    std::vector<grpc::Slice> slices;
    if (result.ok() && !in.Dump(&slices).ok())
      result = Status::Internal("cannot read the reply bytes");
    std::string reply;
    for (const auto& s : slices) reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
    std::unique_ptr<google::protobuf::Message> response(
        factory->GetPrototype(response_type)->New());
    if (result.ok() && !response->ParseFromString(reply))
      result = Status::DataLoss("unparsable reflection reply");
    if (result.ok()) responses.push_back(std::move(response));
  }
  if (!result.ok()) context.TryCancel();
  call->WritesDone(reinterpret_cast<void*>(++next_tag));
  await();
  grpc::Status finish;
  call->Finish(&finish, reinterpret_cast<void*>(++next_tag));
  await();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  if (!result.ok()) return result;
  if (!finish.ok()) return FromGrpcStatus(finish);
  return responses;
}

class LabelStoreServer {
 public:
  explicit LabelStoreServer(const std::string& data_dir) : data_dir_(data_dir) {}
  void Start(const std::vector<std::string>& extra_flags = {}) {
    port_ = PickFreePort();
    metrics_port_ = PickFreePort();
    address_ = "127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = {
        "--listen",   address_,  "--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port_),
        "--data-dir", data_dir_, "--block-cache-mb", "16"};
    args.insert(args.end(), extra_flags.begin(), extra_flags.end());
    Status s = process_.Start(testing::BinPath("mlcd-labelstore"), args, data_dir_ + ".log");
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = testing::WaitForServing(address_, std::chrono::seconds(30));
    ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << process_.Log();
  }
  ChildProcess& process() { return process_; }
  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }

 private:
  std::string data_dir_;
  ChildProcess process_;
  std::string address_;
  int port_ = 0;
  int metrics_port_ = 0;
};

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<LabelStoreServer>(dir_.Sub("store"));
    ASSERT_NO_FATAL_FAILURE(server_->Start());
    client_ = std::make_unique<LabelStoreClient>(server_->address());
    stub_ = v1::LabelStore::NewStub(MakeChannel(server_->address()));
  }
  LabelSetSpec Spec(const std::string& name, int32_t k, int32_t l, bool scores = false) {
    LabelSetSpec spec;
    spec.name = name;
    spec.num_classes = k;
    spec.labels_per_sample = l;
    spec.with_scores = scores;
    return spec;
  }
  // Rows for ids [begin, end) of a set with k classes and l labels.
  std::vector<int32_t> Rows(uint64_t begin, uint64_t end, int l, int32_t k) {
    std::vector<int32_t> rows;
    for (uint64_t id = begin; id < end; ++id) {
      for (int c = 0; c < l; ++c) rows.push_back(LabelOf(id, c, k));
    }
    return rows;
  }
  std::vector<uint64_t> Ids(uint64_t begin, uint64_t end) {
    std::vector<uint64_t> ids;
    for (uint64_t id = begin; id < end; ++id) ids.push_back(id);
    return ids;
  }
  // Sends `messages` on one raw WriteLabels stream; returns the call's status.
  Status RawWrite(const std::vector<v1::WriteLabelsRequest>& messages) {
    grpc::ClientContext context;
    v1::WriteLabelsResponse response;
    auto stream = stub_->WriteLabels(&context, &response);
    for (const auto& m : messages) {
      if (!stream->Write(m)) break;
    }
    stream->WritesDone();
    return FromGrpcStatus(stream->Finish());
  }
  v1::WriteLabelsRequest Msg(const std::string& name, const std::vector<uint64_t>& ids, int l,
                             int32_t k) {
    v1::WriteLabelsRequest m;
    m.set_name(name);
    for (uint64_t id : ids) {
      m.add_sample_ids(id);
      for (int c = 0; c < l; ++c) m.add_labels(LabelOf(id, c, k));
    }
    return m;
  }

  TempDir dir_;
  std::unique_ptr<LabelStoreServer> server_;
  std::unique_ptr<LabelStoreClient> client_;
  std::unique_ptr<v1::LabelStore::Stub> stub_;
};

// Acknowledged writes (Finish() == OK) survive kill -9 of the server in the middle of a stream
// of writes, and the server restarts on the same data dir with all of them intact.
TEST_F(ServiceTest, AcknowledgedRowsSurviveKill9) {
  const int l = 8;
  const int32_t k = 1000;
  ASSERT_TRUE(client_->CreateLabelSet(Spec("durable/r0", k, l)).ok());
  // A large acknowledged write first (several messages).
  auto first = client_->WriteLabels("durable/r0", Ids(0, 20000).data(), 20000, l,
                                    Rows(0, 20000, l, k).data(), nullptr, 3000);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->messages(), 7u);
  EXPECT_EQ(first->num_samples(), 20000u);

  // Then a writer that keeps writing 500-row streams until the server dies.
  std::mutex mu;
  uint64_t acknowledged_end = 20000;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    uint64_t next = 20000;
    while (!stop) {
      auto ids = Ids(next, next + 500);
      auto rows = Rows(next, next + 500, l, k);
      auto w = client_->WriteLabels("durable/r0", ids.data(), ids.size(), l, rows.data());
      if (!w.ok()) break;
      std::lock_guard<std::mutex> lock(mu);
      next += 500;
      acknowledged_end = next;
    }
  });
  // Kill once a few streams are acknowledged, while the writer is in the middle of more.
  for (int i = 0; i < 400; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (acknowledged_end >= 22000) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  server_->process().Signal(SIGKILL);
  server_->process().Wait(std::chrono::seconds(10));
  stop = true;
  writer.join();
  uint64_t end;
  {
    std::lock_guard<std::mutex> lock(mu);
    end = acknowledged_end;
  }
  EXPECT_GT(end, 20000u) << "the writer should have had some streams acknowledged before the kill";

  ASSERT_NO_FATAL_FAILURE(server_->Start());
  LabelStoreClient client(server_->address());
  auto info = client.Describe("durable/r0");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_GE(info->num_samples(), end);
  EXPECT_EQ(info->state(), v1::LABEL_SET_STATE_OPEN);
  auto ids = Ids(0, end);
  LabelBatch batch;
  ASSERT_TRUE(client.GetLabels("durable/r0", ids.data(), ids.size(), false, &batch).ok());
  EXPECT_TRUE(batch.missing_ids.empty())
      << batch.missing_ids.size() << " acknowledged rows lost, first id "
      << (batch.missing_ids.empty() ? 0 : batch.missing_ids[0]);
  EXPECT_EQ(batch.labels, Rows(0, end, l, k));
  // The set is still writable and sealable after the restart.
  EXPECT_TRUE(client.Seal("durable/r0", true).ok());
}

TEST_F(ServiceTest, EveryBadInputGetsItsStatusCode) {
  const int l = 4;
  const int32_t k = 10;
  ASSERT_TRUE(client_->CreateLabelSet(Spec("s", k, l)).ok());
  ASSERT_TRUE(client_->CreateLabelSet(Spec("scored", k, l, true)).ok());
  ASSERT_TRUE(client_->WriteLabels("s", Ids(0, 10).data(), 10, l, Rows(0, 10, l, k).data()).ok());

  auto code_of = [](const Status& s) { return s.code(); };
  // Unknown set: every method.
  EXPECT_EQ(code_of(client_->Describe("nope").status()), StatusCode::kNotFound);
  EXPECT_EQ(code_of(client_->Seal("nope").status()), StatusCode::kNotFound);
  EXPECT_EQ(code_of(client_->Delete("nope").status()), StatusCode::kNotFound);
  EXPECT_EQ(code_of(client_->GetLabels("nope", std::vector<uint64_t>{1}).status()),
            StatusCode::kNotFound);
  Status unknown_write =
      client_->WriteLabels("nope", Ids(0, 1).data(), 1, l, Rows(0, 1, l, k).data()).status();
  EXPECT_EQ(unknown_write.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown_write.message().find("'nope' does not exist"), std::string::npos)
      << unknown_write.message();

  // Duplicate name.
  EXPECT_EQ(code_of(client_->CreateLabelSet(Spec("s", k, l)).status()), StatusCode::kAlreadyExists);
  // Bad names and shapes.
  const std::vector<std::string> bad_names = {"",     "has space", "/abs",
                                              "a//b", "a/../b",    std::string(201, 'n')};
  for (const std::string& name : bad_names) {
    EXPECT_EQ(code_of(client_->CreateLabelSet(Spec(name, k, l)).status()),
              StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(code_of(client_->Describe(name).status()), StatusCode::kInvalidArgument) << name;
  }
  EXPECT_EQ(code_of(client_->CreateLabelSet(Spec("k0", 0, 1)).status()),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(client_->CreateLabelSet(Spec("l0", 10, 0)).status()),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(client_->CreateLabelSet(Spec("lbig", 5000, 1025)).status()),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(client_->CreateLabelSet(Spec("lk", 3, 4)).status()),
            StatusCode::kInvalidArgument);

  // Bad write messages; each must leave the set unchanged.
  auto label_out_of_range = Msg("s", {0, 1}, l, k);
  label_out_of_range.set_labels(5, k);
  auto wrong_width = Msg("s", {0, 1}, l, k);
  wrong_width.mutable_labels()->RemoveLast();
  auto with_scores = Msg("s", {0}, l, k);
  for (int c = 0; c < l; ++c) with_scores.add_scores(0.5f);
  auto no_scores = Msg("scored", {0}, l, k);
  auto duplicate_ids = Msg("s", {3, 4, 3}, l, k);
  v1::WriteLabelsRequest empty_batch;
  empty_batch.set_name("s");
  std::vector<uint64_t> many(kMaxRowsPerWriteMessage + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i;
  auto oversized = Msg("s", many, 1, k);
  auto unnamed = Msg("", {0}, l, k);
  struct Case {
    const char* what;
    std::vector<v1::WriteLabelsRequest> messages;
    StatusCode code;
    const char* words;
  };
  std::vector<Case> cases = {
      {"label outside [0,k)",
       {label_out_of_range},
       StatusCode::kInvalidArgument,
       "outside [0, 10)"},
      {"wrong row width", {wrong_width}, StatusCode::kInvalidArgument, "wrong row width"},
      {"scores for a set without", {with_scores}, StatusCode::kInvalidArgument, "scores mismatch"},
      {"missing scores", {no_scores}, StatusCode::kInvalidArgument, "scores mismatch"},
      {"duplicate ids", {duplicate_ids}, StatusCode::kInvalidArgument, "duplicate ids"},
      {"empty batch", {empty_batch}, StatusCode::kInvalidArgument, "empty batch"},
      {"oversized batch", {oversized}, StatusCode::kInvalidArgument, "too large"},
      {"first message unnamed", {unnamed}, StatusCode::kInvalidArgument, "must name the label set"},
      {"empty stream", {}, StatusCode::kInvalidArgument, "no messages"},
      {"two sets in one stream",
       {Msg("s", {0}, l, k), Msg("scored", {0}, l, k)},
       StatusCode::kInvalidArgument,
       "one stream per set"},
      {"bad second message",
       {Msg("s", {0}, l, k), label_out_of_range},
       StatusCode::kInvalidArgument,
       "WriteLabels message 1"},
  };
  for (const auto& c : cases) {
    Status s = RawWrite(c.messages);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.words), std::string::npos) << c.what << ": " << s.message();
  }
  auto after = client_->GetLabels("s", Ids(0, 12));
  ASSERT_TRUE(after.ok());
  std::vector<int32_t> expected = Rows(0, 10, l, k);
  for (int i = 0; i < 2 * l; ++i) expected.push_back(-1);
  EXPECT_EQ(after->labels, expected) << "a rejected message changed rows";
  EXPECT_EQ(client_->Describe("s")->num_samples(), 10u);

  // Reads: empty, oversized, scores from a set without scores, malformed list paging.
  v1::GetLabelsRequest get;
  get.set_name("s");
  v1::GetLabelsResponse got;
  {
    grpc::ClientContext context;
    EXPECT_EQ(stub_->GetLabels(&context, get, &got).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  for (uint64_t i = 0; i <= kMaxIdsPerRead; ++i) get.add_sample_ids(i);
  {
    grpc::ClientContext context;
    EXPECT_EQ(stub_->GetLabels(&context, get, &got).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(code_of(client_->GetLabels("s", std::vector<uint64_t>{1}, true).status()),
            StatusCode::kFailedPrecondition);
  {
    v1::ListLabelSetsRequest list;
    list.set_page_size(-5);
    v1::ListLabelSetsResponse listed;
    grpc::ClientContext context;
    EXPECT_EQ(stub_->ListLabelSets(&context, list, &listed).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }

  // Sealed sets refuse writes; require_open refuses a second seal.
  ASSERT_TRUE(client_->Seal("s", true).ok());
  Status sealed_write =
      client_->WriteLabels("s", Ids(20, 21).data(), 1, l, Rows(20, 21, l, k).data()).status();
  EXPECT_EQ(sealed_write.code(), StatusCode::kFailedPrecondition) << sealed_write.ToString();
  EXPECT_EQ(code_of(client_->Seal("s", true).status()), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client_->Seal("s", false).ok());

  // The client library splits reads over the per-request limit.
  auto ids = Ids(0, kMaxIdsPerRead + 10);
  LabelBatch big;
  ASSERT_TRUE(client_->GetLabels("s", ids.data(), ids.size(), false, &big).ok());
  EXPECT_EQ(big.num_rows(), ids.size());
  EXPECT_EQ(big.missing_ids.size(), ids.size() - 10);
  EXPECT_EQ(big.missing_indices.back(), ids.size() - 1);
  std::vector<int64_t> negative = {1, -2};
  EXPECT_EQ(client_->GetLabels("s", negative.data(), negative.size(), false, &big).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ServiceTest, ScoresListDeleteAndMetrics) {
  const int l = 2;
  const int32_t k = 50;
  ASSERT_TRUE(client_->CreateLabelSet(Spec("m/a", k, l, true)).ok());
  ASSERT_TRUE(client_->CreateLabelSet(Spec("m/b", k, l)).ok());
  std::vector<float> scores = {0.9f, 0.1f, 0.8f, 0.2f};
  auto w =
      client_->WriteLabels("m/a", Ids(5, 7).data(), 2, l, Rows(5, 7, l, k).data(), scores.data());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto got = client_->GetLabels("m/a", {6, 9, 5}, true);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->labels_per_sample, 2);
  EXPECT_FLOAT_EQ(got->scores[0], 0.8f);
  EXPECT_TRUE(std::isnan(got->scores[2]));
  EXPECT_FLOAT_EQ(got->scores[5], 0.1f);
  EXPECT_EQ(got->missing_indices, std::vector<uint32_t>{1});
  EXPECT_EQ(got->missing_ids, std::vector<uint64_t>{9});

  auto listed = client_->List("m/");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].num_samples(), 2u);
  auto deleted = client_->Delete("m/a");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->rows_deleted(), 2u);
  EXPECT_EQ(client_->List("m/")->size(), 1u);

  std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("mlcd_labelstore_requests_total{code=\"OK\",method=\"GetLabels\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("mlcd_labelstore_ids_read_total 3"), std::string::npos);
  EXPECT_NE(metrics.find("mlcd_labelstore_ids_missing_total 1"), std::string::npos);
  EXPECT_NE(metrics.find("mlcd_labelstore_rows_written_total 2"), std::string::npos);
  EXPECT_NE(metrics.find("mlcd_labelstore_request_duration_seconds_bucket{method=\"WriteLabels\""),
            std::string::npos);
  EXPECT_NE(metrics.find("mlcd_labelstore_label_sets 1"), std::string::npos);
}

TEST_F(ServiceTest, SigtermShutsDownCleanlyAndDataDirIsExclusive) {
  ASSERT_TRUE(client_->CreateLabelSet(Spec("keep", 10, 1)).ok());
  ASSERT_TRUE(client_->WriteLabels("keep", Ids(0, 3).data(), 3, 1, Rows(0, 3, 1, 10).data()).ok());

  // A second server on the same data dir refuses to start.
  std::string output;
  int rc = testing::RunCommand(
      testing::BinPath("mlcd-labelstore"),
      {"--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", dir_.Sub("store")}, &output,
      {}, std::chrono::seconds(30));
  EXPECT_EQ(rc, 1) << output;
  EXPECT_NE(output.find("another mlcd-labelstore"), std::string::npos) << output;

  // Close this process's connections first: an idle client connection is only polled every
  // few seconds (gRPC's backup poller), which would hold the server's graceful shutdown.
  client_.reset();
  stub_.reset();
  const auto stop_start = std::chrono::steady_clock::now();
  int status = server_->process().Stop(std::chrono::seconds(20));
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, std::chrono::seconds(4));
  ASSERT_TRUE(WIFEXITED(status)) << server_->process().Log();
  EXPECT_EQ(WEXITSTATUS(status), 0) << server_->process().Log();
  EXPECT_NE(server_->process().Log().find("closed cleanly"), std::string::npos);

  ASSERT_NO_FATAL_FAILURE(server_->Start());
  LabelStoreClient client(server_->address());
  auto got = client.GetLabels("keep", Ids(0, 3));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->labels, Rows(0, 3, 1, 10));
}

// A WriteLabels stream that outlives a delete + re-create of its set wrote its later
// messages into the new set. Now the stream ends ABORTED and the new set stays untouched.
TEST_F(ServiceTest, AStreamThatOutlivesADeleteAndRecreateWritesNothingIntoTheNewSet) {
  const int l = 2;
  const int32_t k = 10;
  ASSERT_TRUE(client_->CreateLabelSet(Spec("x/r0", k, l)).ok());
  auto writer = client_->OpenWriter("x/r0");
  ASSERT_TRUE(writer->Write(Ids(0, 100), Rows(0, 100, l, k)).ok());
  // The server has committed the first message (the stream is bound to this set) ...
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (client_->Describe("x/r0")->num_samples() < 100 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(client_->Describe("x/r0")->num_samples(), 100u);
  // ... when someone else deletes the set and creates a new one of the same name.
  ASSERT_TRUE(client_->Delete("x/r0").ok());
  ASSERT_TRUE(client_->CreateLabelSet(Spec("x/r0", k, l)).ok());

  (void)writer->Write(Ids(100, 200), Rows(100, 200, l, k));  // may already see the end
  auto finished = writer->Finish();
  ASSERT_FALSE(finished.ok());
  EXPECT_EQ(finished.status().code(), StatusCode::kAborted) << finished.status().ToString();
  EXPECT_NE(finished.status().message().find("deleted and created again while this WriteLabels "
                                             "stream was open"),
            std::string::npos)
      << finished.status().message();
  EXPECT_NE(finished.status().message().find("WriteLabels message 1"), std::string::npos);
  auto info = client_->Describe("x/r0");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_samples(), 0u) << "the old stream wrote into the new set";

  // A new stream writes the new set.
  auto rewrite = client_->WriteLabels("x/r0", Ids(0, 10).data(), 10, l, Rows(0, 10, l, k).data());
  ASSERT_TRUE(rewrite.ok()) << rewrite.status().ToString();
  EXPECT_EQ(client_->Describe("x/r0")->num_samples(), 10u);
}

// Reflection is on (grpcurl and friends can discover the API): the services are listed and the
// label store's schema is served.
TEST_F(ServiceTest, ReflectionListsAndDescribesTheServices) {
  auto responses = AskReflection(
      server_->address(), {"list_services: ''", "file_containing_symbol: 'mlcd.v1.LabelStore'",
                           "file_containing_symbol: 'mlcd.v1.NoSuchService'"});
  ASSERT_TRUE(responses.ok()) << responses.status().ToString();
  ASSERT_EQ(responses->size(), 3u);

  std::string listed;
  google::protobuf::TextFormat::PrintToString(*(*responses)[0], &listed);
  for (const char* service : {"mlcd.v1.LabelStore", "grpc.health.v1.Health",
                              "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_NE(listed.find(std::string("name: \"") + service + "\""), std::string::npos)
        << service << "\n"
        << listed;
  }

  // The file that defines LabelStore, as serialized FileDescriptorProtos.
  const google::protobuf::Message& described = *(*responses)[1];
  const auto* reflection = described.GetReflection();
  const auto* fd_field = described.GetDescriptor()->FindFieldByName("file_descriptor_response");
  ASSERT_NE(fd_field, nullptr);
  ASSERT_TRUE(reflection->HasField(described, fd_field)) << described.DebugString();
  const google::protobuf::Message& files = reflection->GetMessage(described, fd_field);
  const auto* bytes_field = files.GetDescriptor()->FindFieldByName("file_descriptor_proto");
  bool found = false;
  for (int i = 0; i < files.GetReflection()->FieldSize(files, bytes_field); ++i) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(
        file.ParseFromString(files.GetReflection()->GetRepeatedString(files, bytes_field, i)));
    for (const auto& service : file.service()) {
      if (file.package() != "mlcd.v1" || service.name() != "LabelStore") continue;
      found = true;
      std::vector<std::string> methods;
      for (const auto& m : service.method()) methods.push_back(m.name());
      for (const char* m :
           {"CreateLabelSet", "WriteLabels", "SealLabelSet", "GetLabels", "DescribeLabelSet"}) {
        EXPECT_NE(std::find(methods.begin(), methods.end(), m), methods.end()) << m;
      }
    }
  }
  EXPECT_TRUE(found) << described.DebugString();

  // An unknown symbol is an error response with NOT_FOUND, not a broken stream.
  std::string unknown;
  google::protobuf::TextFormat::PrintToString(*(*responses)[2], &unknown);
  EXPECT_NE(unknown.find("error_response"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("error_code: 5"), std::string::npos) << unknown;
}

// --min-free-mb on the real binary: a reserve above what the disk has free (1 PiB) refuses
// every write with UNAVAILABLE naming the flag, health turns NOT_SERVING, reads go on; a value
// over the bound is a usage error.
TEST(ServiceReserveTest, MinFreeMbAboveTheFreeSpaceRefusesWritesAndServesReads) {
  TempDir dir;
  LabelStoreServer server(dir.Sub("store"));
  ASSERT_NO_FATAL_FAILURE(server.Start({"--min-free-mb", std::to_string(kMaxMinFreeMb)}));
  LabelStoreClient client(server.address());
  LabelSetSpec spec;
  spec.name = "reserve";
  spec.num_classes = 10;
  spec.labels_per_sample = 1;
  Status created = client.CreateLabelSet(spec).status();
  EXPECT_EQ(created.code(), StatusCode::kUnavailable) << created.ToString();
  EXPECT_NE(created.message().find("writes need " + std::to_string(kMaxMinFreeMb) +
                                   " MiB, --min-free-mb"),
            std::string::npos)
      << created.ToString();
  auto sets = client.List();
  EXPECT_TRUE(sets.ok()) << sets.status().ToString();
  // The health check follows the storage within a poll (200 ms).
  bool not_serving = false;
  for (int i = 0; i < 50 && !not_serving; ++i) {
    not_serving = !testing::WaitForServing(server.address(), std::chrono::milliseconds(100)).ok();
    if (!not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(not_serving) << "health must say NOT_SERVING below the reserve";

  std::string output;
  int rc = testing::RunCommand(testing::BinPath("mlcd-labelstore"),
                               {"--listen", "127.0.0.1:0", "--data-dir", dir.Sub("other"),
                                "--min-free-mb", std::to_string(kMaxMinFreeMb + 1)},
                               &output, {}, std::chrono::seconds(30));
  EXPECT_NE(rc, 0) << output;
  EXPECT_NE(output.find("--min-free-mb"), std::string::npos) << output;
}

TEST(ServiceUnreachableTest, ClientNamesTheAddress) {
  const std::string address = "127.0.0.1:" + std::to_string(PickFreePort());
  LabelStoreClientOptions options;
  options.timeout = std::chrono::seconds(5);
  LabelStoreClient client(address, options);
  Status s = client.Describe("x").status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(address), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mlcd::labelstore
