// A worker agent's children hold none of its credentials (docs/security.md, "Worker
// children"): on a real cluster with TLS and tokens on, a job whose labels the gang writes
// (engine gang: ASSIGN_LABELS children write with their capability, TRAIN children read)
// succeeds while no child's environment names a certificate, key or token, every child runs
// under the Landlock ruleset that withholds the agent's key and token files (where the
// kernel has Landlock), and every child's assignment names the agent's label gateway
// instead of the label store. The gateway
// itself, in front of a real label store, lets a child read its assignment's sets and write
// its set with a capability, and nothing else, even though the agent behind it is an admin.
#include <dirent.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "clients/write_capability.h"
#include "common/acting_for.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "common/security.h"
#include "common/withheld_files.h"
#include "mlcd/v1/labelstore.grpc.pb.h"
#include "tests/coordinator/harness.h"
#include "tests/testing/security.h"
#include "worker/agent/label_gateway.h"

namespace mlcd::testing {
namespace {

using grpc::StatusCode;
using std::chrono::seconds;

// The file's text, "" when it cannot be read (a process that just exited).
std::string ReadAll(const std::string& path) {
  StatusOr<std::string> text = ReadFileToString(path);
  return text.ok() ? *text : "";
}

// The NUL-separated entries of /proc/<pid>/<file>.
std::vector<std::string> ProcEntries(const std::string& pid, const char* file) {
  std::vector<std::string> entries;
  std::stringstream in(ReadAll("/proc/" + pid + "/" + file));
  for (std::string e; std::getline(in, e, '\0');) entries.push_back(e);
  return entries;
}

// What the test saw of one worker child.
struct SeenChild {
  std::string command;                   // train, assign-labels, ...
  std::vector<std::string> credentials;  // environment entries naming a credential
  std::string labelstore_address;        // from its assignment file
  bool no_new_privs = false;             // set by the agent with the child's Landlock ruleset
};

// Every process whose command line names an assignment file under `dir`.
void LookForChildren(const std::string& dir, std::map<std::string, SeenChild>* seen) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return;
  while (dirent* e = ::readdir(proc)) {
    const std::string pid = e->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos || seen->count(pid)) continue;
    const std::vector<std::string> argv = ProcEntries(pid, "cmdline");
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] != "--assignment" || argv[i + 1].rfind(dir, 0) != 0) continue;
      SeenChild child;
      child.command = argv.size() > 1 ? argv[1] : "";
      for (const std::string& v : ProcEntries(pid, "environ")) {
        for (const char* name : {"MLCD_TLS_CERT=", "MLCD_TLS_KEY=", "MLCD_TLS_CA=",
                                 "MLCD_TOKEN_FILE=", "MLCD_TOKENS_FILE="})
          if (v.rfind(name, 0) == 0) child.credentials.push_back(v);
      }
      child.no_new_privs =
          ReadAll("/proc/" + pid + "/status").find("NoNewPrivs:\t1") != std::string::npos;
      auto json = nlohmann::json::parse(ReadAll(argv[i + 1]), nullptr, false);
      if (json.is_object()) child.labelstore_address = json.value("labelstore_address", "");
      (*seen)[pid] = child;
    }
  }
  ::closedir(proc);
}

TEST(ChildCredentialsTest, AGangJobRunsWithNoCredentialInAnyChild) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_TRUE(cluster.StartServicesAndWorkers(2).ok()) << cluster.Logs();
  TinyJob spec;
  spec.clustering_fields = "engine: gang";
  auto submitted = cluster.Submit(spec.Yaml());
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();

  std::map<std::string, SeenChild> seen;
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done) {
      LookForChildren(dir.path() + "/workers/", &seen);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto finished = cluster.WaitForJob(
      submitted->id(), [](const v1::Job& j) { return IsTerminal(j.state()); }, seconds(240));
  done = true;
  watcher.join();
  ASSERT_TRUE(finished.ok()) << finished.status().ToString() << cluster.Logs();
  EXPECT_EQ(finished->state(), v1::JOB_STATE_SUCCEEDED) << finished->message() << cluster.Logs();

  std::set<std::string> commands;
  for (const auto& [pid, child] : seen) {
    commands.insert(child.command);
    EXPECT_TRUE(child.credentials.empty())
        << child.command << " child " << pid << " got " << child.credentials.front();
    EXPECT_EQ(child.labelstore_address.rfind("unix:", 0), 0u)
        << child.command << " child " << pid << " dials " << child.labelstore_address;
    // Restricted by the ruleset that withholds the agent's key and token files
    // (tests/common/withheld_files_test.cc shows what it withholds).
    if (LandlockAbi() >= kWithheldFilesMinLandlockAbi) {
      EXPECT_TRUE(child.no_new_privs) << child.command << " child " << pid;
    }
  }
  // The gang's label writers and the trainers were both seen.
  EXPECT_TRUE(commands.count("train")) << seen.size() << " children seen";
  EXPECT_GE(commands.size(), 2u) << seen.size() << " children seen";
}

constexpr int kClasses = 4;

class LabelGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartLabelstore().ok()) << cluster_.Logs();
    store_ = v1::LabelStore::NewStub(TokenlessChannel(cluster_.labelstore_address()));
    // The agent's side: this process's certificate and admin token (EnableTestSecurity).
    auto gateway = worker::LabelGateway::Start(dir_.path() + "/gw/labels.sock");
    ASSERT_TRUE(gateway.ok()) << gateway.status().ToString();
    gateway_ = std::move(*gateway);
    // The child's side: plaintext on the socket, no certificate, no token.
    child_ = v1::LabelStore::NewStub(
        grpc::CreateChannel(gateway_->address(), grpc::InsecureChannelCredentials()));
    for (const auto& [name, acting] : std::vector<std::pair<std::string, ActingFor>>{
             {kSet, ActingForJob("j1")}, {kOther, ActingForJob("j2")}}) {
      v1::CreateLabelSetRequest request;
      request.set_name(name);
      request.set_num_classes(kClasses);
      request.set_labels_per_sample(1);
      v1::LabelSetInfo info;
      grpc::Status st = store_->CreateLabelSet(CallContext("", acting).get(), request, &info);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
    v1::DelegateWritesRequest request;
    request.set_name(kSet);
    ASSERT_TRUE(
        store_->DelegateWrites(CallContext("", ActingForJob("j1")).get(), request, &delegation_)
            .ok());
  }

  // An ASSIGN_LABELS assignment of job j1 writing kSet.
  worker::LabelGatewayScope AssignScope() const {
    v1::Assignment a;
    a.set_id("a1");
    a.set_job_id("j1");
    a.set_kind(v1::ASSIGNMENT_KIND_ASSIGN_LABELS);
    a.set_label_set(kSet);
    a.set_labelstore_address(cluster_.labelstore_address());
    return worker::ScopeOf(a);
  }

  std::string Capability(const std::string& set) const {
    StatusOr<std::string> cap = labelstore::MintWriteCapability(
        delegation_.delegation_key(), set, delegation_.incarnation(), NowUnixMs() / 1000 + 600,
        "job:j1/r0/assign_labels/rank0");
    EXPECT_TRUE(cap.ok()) << cap.status().ToString();
    return cap.ok() ? *cap : "";
  }

  static std::unique_ptr<grpc::ClientContext> ChildContext(const std::string& capability = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(DeadlineIn(std::chrono::seconds(20)));
    if (!capability.empty()) ctx->AddMetadata(labelstore::kWriteCapabilityHeader, capability);
    return ctx;
  }

  // The child writes sample 7 -> `label` into `set`.
  grpc::Status ChildWrite(const std::string& set, const std::string& capability, int label) {
    auto ctx = ChildContext(capability);
    v1::WriteLabelsResponse response;
    auto stream = child_->WriteLabels(ctx.get(), &response);
    v1::WriteLabelsRequest message;
    message.set_name(set);
    message.add_sample_ids(7);
    message.add_labels(label);
    stream->Write(message);
    stream->WritesDone();
    return stream->Finish();
  }

  grpc::Status ChildDescribe(const std::string& set, v1::LabelSetInfo* info = nullptr) {
    v1::DescribeLabelSetRequest request;
    request.set_name(set);
    v1::LabelSetInfo ignored;
    return child_->DescribeLabelSet(ChildContext().get(), request, info ? info : &ignored);
  }

  static void ExpectRefused(const grpc::Status& st, const std::string& what) {
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("write capability"), std::string::npos)
        << what << ": " << st.error_message();
  }

  static constexpr char kSet[] = "job/j1/r0";
  static constexpr char kOther[] = "job/j2/r0";
  TempDir dir_;
  TestCluster cluster_{dir_};
  std::unique_ptr<v1::LabelStore::Stub> store_, child_;
  std::unique_ptr<worker::LabelGateway> gateway_;
  v1::DelegateWritesResponse delegation_;
};

TEST_F(LabelGatewayTest, AChildReadsAndWritesItsAssignmentsSetAndNothingElse) {
  // No assignment runs: nothing passes.
  ExpectRefused(ChildDescribe(kSet), "before any assignment");

  gateway_->SetScope(AssignScope());
  // Its own set: read, and written by its capability only.
  EXPECT_TRUE(ChildDescribe(kSet).ok());
  ExpectRefused(ChildWrite(kSet, "", 2), "a write without a capability");
  grpc::Status written = ChildWrite(kSet, Capability(kSet), 2);
  ASSERT_TRUE(written.ok()) << written.error_message();
  v1::GetLabelsRequest read;
  read.set_name(kSet);
  read.add_sample_ids(7);
  v1::GetLabelsResponse labels;
  grpc::Status got = child_->GetLabels(ChildContext().get(), read, &labels);
  ASSERT_TRUE(got.ok()) << got.error_message();
  ASSERT_EQ(labels.labels_size(), 1);
  EXPECT_EQ(labels.labels(0), 2);
  // A forged capability reaches the label store, which refuses it.
  std::string altered = Capability(kSet);
  altered.back() = altered.back() == 'a' ? 'b' : 'a';
  EXPECT_EQ(ChildWrite(kSet, altered, 3).error_code(), StatusCode::PERMISSION_DENIED);

  // A child's acting-for header is not passed on: the label store refuses it on a write from
  // the agent (a token caller), so the write would fail if it were.
  for (bool through_gateway : {true, false}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(20)));
    if (!through_gateway) ctx.AddMetadata("authorization", "Bearer " + TestCerts().admin_token);
    ctx.AddMetadata(labelstore::kWriteCapabilityHeader, Capability(kSet));
    AttachActingFor(ActingForJob("j2"), &ctx);
    v1::WriteLabelsResponse response;
    auto stream = (through_gateway ? child_ : store_)->WriteLabels(&ctx, &response);
    v1::WriteLabelsRequest message;
    message.set_name(kSet);
    message.add_sample_ids(7);
    message.add_labels(2);
    stream->Write(message);
    stream->WritesDone();
    grpc::Status st = stream->Finish();
    if (through_gateway) {
      EXPECT_TRUE(st.ok()) << st.error_message();
    } else {
      EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
    }
  }

  // Another job's set: neither read nor written, whatever capability is shown.
  ExpectRefused(ChildDescribe(kOther), "describe another job's set");
  ExpectRefused(ChildWrite(kOther, Capability(kSet), 3), "write another job's set");
  read.set_name(kOther);
  ExpectRefused(child_->GetLabels(ChildContext().get(), read, &labels), "read another's set");

  // Nothing but reading and writing, though the agent behind the gateway is an admin.
  v1::LabelSetInfo info;
  v1::CreateLabelSetRequest create;
  create.set_name("child/own");
  create.set_num_classes(kClasses);
  create.set_labels_per_sample(1);
  ExpectRefused(child_->CreateLabelSet(ChildContext().get(), create, &info), "create");
  v1::DelegateWritesRequest delegate;
  delegate.set_name(kSet);
  v1::DelegateWritesResponse delegation;
  ExpectRefused(child_->DelegateWrites(ChildContext().get(), delegate, &delegation), "delegate");
  v1::SealLabelSetRequest seal;
  seal.set_name(kSet);
  ExpectRefused(child_->SealLabelSet(ChildContext().get(), seal, &info), "seal");
  v1::ListLabelSetsRequest list;
  v1::ListLabelSetsResponse sets;
  ExpectRefused(child_->ListLabelSets(ChildContext().get(), list, &sets), "list");
  v1::DeleteLabelSetRequest del;
  del.set_name(kOther);
  v1::DeleteLabelSetResponse deleted;
  ExpectRefused(child_->DeleteLabelSet(ChildContext().get(), del, &deleted), "delete");

  // A TRAIN assignment of the same job reads the set and writes nothing.
  worker::LabelGatewayScope train = AssignScope();
  train.writable_set.clear();
  gateway_->SetScope(train);
  EXPECT_TRUE(ChildDescribe(kSet).ok());
  ExpectRefused(ChildWrite(kSet, Capability(kSet), 1), "a TRAIN child writing");

  // The assignment ended: nothing passes again.
  gateway_->ClearScope();
  ExpectRefused(ChildDescribe(kSet), "after the assignment");
  v1::DescribeLabelSetRequest describe;
  describe.set_name(kSet);
  ASSERT_TRUE(store_->DescribeLabelSet(CallContext("").get(), describe, &info).ok());
  EXPECT_EQ(info.num_samples(), 1u);
  EXPECT_EQ(info.state(), v1::LABEL_SET_STATE_OPEN);
}

}  // namespace
}  // namespace mlcd::testing
