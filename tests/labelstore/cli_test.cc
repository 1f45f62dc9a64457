// mlcdctl labels ... through the real mlcdctl and mlcd-labelstore binaries: exit codes, text
// and JSON output, npy round trips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <limits>

#include "common/dataset/dataset_index.h"
#include "common/file_util.h"
#include "common/net.h"
#include "common/npy.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::BinPath;
using testing::ChildProcess;
using testing::RunCommand;
using testing::TempDir;

class LabelsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    address_ = "127.0.0.1:" + std::to_string(PickFreePort());
    Status s = server_.Start(
        BinPath("mlcd-labelstore"),
        {"--listen", address_, "--metrics-listen", "", "--data-dir", dir_.Sub("store")},
        dir_.Sub("store.log"));
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = testing::WaitForServing(address_, std::chrono::seconds(30));
    ASSERT_TRUE(s.ok()) << s.ToString() << server_.Log();
  }
  // Runs mlcdctl with the store's address from the environment (as scripts do).
  int Ctl(std::vector<std::string> args, std::string* output) {
    return RunCommand(BinPath("mlcdctl"), args, output, {"MLCD_LABELSTORE=" + address_},
                      std::chrono::seconds(60));
  }
  nlohmann::json Json(const std::string& output) {
    auto start = output.find_first_of("{[");
    EXPECT_NE(start, std::string::npos) << output;
    return nlohmann::json::parse(output.substr(start == std::string::npos ? 0 : start));
  }

  TempDir dir_;
  ChildProcess server_;
  std::string address_;
};

TEST_F(LabelsCliTest, CreatePutGetDescribeSealDelete) {
  std::string out;
  ASSERT_EQ(
      Ctl({"labels", "create", "--name", "cli/r0", "--k", "100", "--l", "3", "--meta", "job=cli"},
          &out),
      0)
      << out;
  EXPECT_NE(out.find("state:       OPEN"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"labels", "create", "--name", "cli/r0", "--k", "100", "--l", "3"}, &out), 4)
      << out;
  EXPECT_NE(out.find("ALREADY_EXISTS"), std::string::npos);

  // 50 rows, int64 on disk (converted by the CLI), default ids 0..49.
  std::vector<int64_t> rows(50 * 3);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>((i * 7) % 100);
  ASSERT_TRUE(WriteNpy(dir_.Sub("rows.npy"), NpyDtype::kInt64, {50, 3}, rows.data()).ok());
  ASSERT_EQ(Ctl({"labels", "put", "--name", "cli/r0", "--labels", dir_.Sub("rows.npy"),
                 "--batch-rows", "16"},
                &out),
            0)
      << out;
  EXPECT_NE(out.find("50 rows in 4 messages"), std::string::npos) << out;

  // Explicit ids: rewrite ids 100 and 101.
  std::vector<int32_t> extra = {1, 2, 3, 4, 5, 6};
  std::vector<uint64_t> extra_ids = {100, 101};
  ASSERT_TRUE(WriteNpy(dir_.Sub("extra.npy"), NpyDtype::kInt32, {2, 3}, extra.data()).ok());
  ASSERT_TRUE(WriteNpy(dir_.Sub("extra_ids.npy"), NpyDtype::kUint64, {2}, extra_ids.data()).ok());
  ASSERT_EQ(Ctl({"-o", "json", "labels", "put", "--name", "cli/r0", "--labels",
                 dir_.Sub("extra.npy"), "--ids", dir_.Sub("extra_ids.npy")},
                &out),
            0)
      << out;
  EXPECT_EQ(Json(out)["num_samples"], 52);

  // Text rows in request order; a missing id is marked.
  ASSERT_EQ(Ctl({"labels", "get", "--name", "cli/r0", "--ids", "101,1,77"}, &out), 0) << out;
  EXPECT_NE(out.find("101\t4 5 6\n"), std::string::npos) << out;
  EXPECT_NE(out.find("1\t21 28 35\n"), std::string::npos) << out;
  EXPECT_NE(out.find("77\tmissing"), std::string::npos) << out;

  // JSON rows.
  ASSERT_EQ(Ctl({"-o", "json", "labels", "get", "cli/r0", "--ids", "0:2,60"}, &out), 0) << out;
  auto j = Json(out);
  EXPECT_EQ(j["labels_per_sample"], 3);
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["rows"][1]["labels"], nlohmann::json::array({3 * 7 % 100, 4 * 7 % 100, 5 * 7 % 100}));
  EXPECT_EQ(j["rows"][2]["missing"], true);
  EXPECT_EQ(j["missing_ids"], nlohmann::json::array({60}));

  // --out writes an n x l int32 npy.
  ASSERT_EQ(
      Ctl({"labels", "get", "--name", "cli/r0", "--ids", "0:50", "--out", dir_.Sub("back.npy")},
          &out),
      0)
      << out;
  auto back = ReadNpyAsInt64(dir_.Sub("back.npy"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, rows);

  ASSERT_EQ(Ctl({"-o", "json", "labels", "describe", "cli/r0"}, &out), 0) << out;
  j = Json(out);
  EXPECT_EQ(j["num_samples"], 52);
  EXPECT_EQ(j["state"], "OPEN");
  EXPECT_EQ(j["metadata"]["job"], "cli");

  ASSERT_EQ(Ctl({"labels", "seal", "--name", "cli/r0"}, &out), 0) << out;
  EXPECT_EQ(Ctl({"labels", "seal", "--name", "cli/r0", "--require-open"}, &out), 5) << out;
  EXPECT_EQ(Ctl({"labels", "put", "--name", "cli/r0", "--labels", dir_.Sub("rows.npy")}, &out), 5)
      << out;
  EXPECT_NE(out.find("sealed"), std::string::npos) << out;

  ASSERT_EQ(Ctl({"-o", "json", "labels", "list", "--prefix", "cli/"}, &out), 0) << out;
  j = Json(out);
  ASSERT_EQ(j["label_sets"].size(), 1u);
  EXPECT_EQ(j["label_sets"][0]["state"], "SEALED");
  ASSERT_EQ(Ctl({"labels", "list"}, &out), 0) << out;
  EXPECT_NE(out.find("cli/r0"), std::string::npos) << out;

  ASSERT_EQ(Ctl({"labels", "delete", "--name", "cli/r0"}, &out), 0) << out;
  EXPECT_NE(out.find("52 rows"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"labels", "delete", "--name", "cli/r0"}, &out), 3) << out;
  EXPECT_EQ(Ctl({"labels", "delete", "--name", "cli/r0", "--allow-missing"}, &out), 0) << out;
}

TEST_F(LabelsCliTest, BadInputExitCodes) {
  std::string out;
  ASSERT_EQ(Ctl({"labels", "create", "--name", "s", "--k", "10", "--l", "2"}, &out), 0) << out;
  EXPECT_EQ(Ctl({"labels", "get", "--name", "nope", "--ids", "1"}, &out), 3) << out;
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos);
  EXPECT_EQ(Ctl({"labels", "get", "--name", "s", "--ids", "1,x"}, &out), 2) << out;
  EXPECT_EQ(Ctl({"labels", "get", "--name", "s"}, &out), 2) << out;
  EXPECT_EQ(Ctl({"labels", "create", "--name", "bad name", "--k", "10", "--l", "2"}, &out), 2)
      << out;
  EXPECT_EQ(Ctl({"labels", "create", "--name", "x", "--k", "10"}, &out), 2) << out;  // missing --l
  EXPECT_EQ(Ctl({"labels", "bogus"}, &out), 2) << out;

  std::vector<int32_t> wide(4 * 3, 1);
  ASSERT_TRUE(WriteNpy(dir_.Sub("wide.npy"), NpyDtype::kInt32, {4, 3}, wide.data()).ok());
  EXPECT_EQ(Ctl({"labels", "put", "--name", "s", "--labels", dir_.Sub("wide.npy")}, &out), 2)
      << out;
  EXPECT_NE(out.find("3 columns"), std::string::npos) << out;
  std::vector<int32_t> high = {1, 10};
  ASSERT_TRUE(WriteNpy(dir_.Sub("high.npy"), NpyDtype::kInt32, {1, 2}, high.data()).ok());
  EXPECT_EQ(Ctl({"labels", "put", "--name", "s", "--labels", dir_.Sub("high.npy")}, &out), 2)
      << out;
  EXPECT_NE(out.find("outside [0, 10)"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"labels", "put", "--name", "s", "--labels", dir_.Sub("missing.npy")}, &out), 3)
      << out;
  // A malformed header (empty 'shape') is bad input, not an uncaught exception.
  std::string header = EncodeNpyHeader(NpyDtype::kInt32, {1, 2});
  header.replace(header.find("(1, 2)"), 6, "      ");
  ASSERT_TRUE(WriteFileAtomically(dir_.Sub("noshape.npy"), header + std::string(8, '\0')).ok());
  EXPECT_EQ(Ctl({"labels", "put", "--name", "s", "--labels", dir_.Sub("noshape.npy")}, &out), 2)
      << out;
  EXPECT_NE(out.find(dir_.Sub("noshape.npy") + ": malformed .npy shape"), std::string::npos) << out;

  // An unreachable store is exit 6 and names the address.
  const std::string dead = "127.0.0.1:" + std::to_string(PickFreePort());
  int rc = RunCommand(BinPath("mlcdctl"),
                      {"--labelstore", dead, "--timeout", "3", "labels", "list"}, &out);
  EXPECT_EQ(rc, 6) << out;
  EXPECT_NE(out.find(dead), std::string::npos) << out;
}

// A bad row halfway through the file is found before anything is sent: the rows before it
// (which would be whole messages with --batch-rows 16) are not written either.
TEST_F(LabelsCliTest, PutOfAFileWithABadRowWritesNothing) {
  std::string out;
  ASSERT_EQ(Ctl({"labels", "create", "--name", "half", "--k", "10", "--l", "2", "--scores"}, &out),
            0)
      << out;
  std::vector<int32_t> rows(40 * 2, 3);
  rows[30 * 2 + 1] = 10;  // outside [0, 10)
  rows[35 * 2] = -1;      // no padding value either
  std::vector<float> scores(40 * 2, 0.5f);
  ASSERT_TRUE(WriteNpy(dir_.Sub("bad_rows.npy"), NpyDtype::kInt32, {40, 2}, rows.data()).ok());
  ASSERT_TRUE(WriteNpy(dir_.Sub("scores.npy"), NpyDtype::kFloat32, {40, 2}, scores.data()).ok());
  const std::vector<std::string> put = {"labels", "put", "--name", "half", "--batch-rows", "16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = put;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  auto expect_nothing_written = [&] {
    ASSERT_EQ(Ctl({"-o", "json", "labels", "describe", "half"}, &out), 0) << out;
    EXPECT_EQ(Json(out)["num_samples"], 0) << out;
  };

  EXPECT_EQ(
      Ctl(with({"--labels", dir_.Sub("bad_rows.npy"), "--scores", dir_.Sub("scores.npy")}), &out),
      2)
      << out;
  EXPECT_NE(
      out.find(
          "label 10 of sample id 30 (row 30, column 1) is outside [0, 10); 2 of 40 rows are bad"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("bad_rows.npy"), std::string::npos) << out;
  EXPECT_NE(out.find("nothing was written to 'half'"), std::string::npos) << out;
  expect_nothing_written();

  // A non-finite score.
  std::vector<int32_t> good(40 * 2, 3);
  ASSERT_TRUE(WriteNpy(dir_.Sub("good.npy"), NpyDtype::kInt32, {40, 2}, good.data()).ok());
  scores[20 * 2] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(WriteNpy(dir_.Sub("inf.npy"), NpyDtype::kFloat32, {40, 2}, scores.data()).ok());
  EXPECT_EQ(Ctl(with({"--labels", dir_.Sub("good.npy"), "--scores", dir_.Sub("inf.npy")}), &out), 2)
      << out;
  EXPECT_NE(out.find("score of sample id 20 (row 20, column 0) is not finite; 1 of 40 rows is bad"),
            std::string::npos)
      << out;
  expect_nothing_written();

  // The same id in two different messages.
  std::vector<uint64_t> ids(40);
  for (uint64_t i = 0; i < 40; ++i) ids[i] = i;
  ids[33] = 3;
  ASSERT_TRUE(WriteNpy(dir_.Sub("dup_ids.npy"), NpyDtype::kUint64, {40}, ids.data()).ok());
  ASSERT_TRUE(WriteNpy(dir_.Sub("scores.npy"), NpyDtype::kFloat32, {40, 2},
                       std::vector<float>(80, 0.5f).data())
                  .ok());
  EXPECT_EQ(Ctl(with({"--labels", dir_.Sub("good.npy"), "--scores", dir_.Sub("scores.npy"), "--ids",
                      dir_.Sub("dup_ids.npy")}),
                &out),
            2)
      << out;
  EXPECT_NE(
      out.find("duplicate ids: sample id 3 appears more than once in " + dir_.Sub("dup_ids.npy")),
      std::string::npos)
      << out;
  expect_nothing_written();

  // The good file goes in whole.
  EXPECT_EQ(Ctl(with({"--labels", dir_.Sub("good.npy"), "--scores", dir_.Sub("scores.npy")}), &out),
            0)
      << out;
  ASSERT_EQ(Ctl({"-o", "json", "labels", "describe", "half"}, &out), 0) << out;
  EXPECT_EQ(Json(out)["num_samples"], 40) << out;
}

}  // namespace
}  // namespace mlcd

namespace mlcd {
namespace {

// A dataset index of five files named by key (the import reads only its keys; the files exist
// so that the index's fingerprint holds).
std::string WriteKeysIndex(const TempDir& dir, const std::vector<std::string>& keys) {
  DatasetIndex index;
  index.format = DatasetFormat::kImageFolder;
  index.paths = {dir.Sub("images")};
  EXPECT_TRUE(MakeDirs(dir.Sub("images")).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string file = dir.Sub("images/" + keys[i] + ".png");
    EXPECT_TRUE(WriteFileAtomically(file, "image " + keys[i]).ok());
    auto stat = StatIndexedFile(file);
    EXPECT_TRUE(stat.ok()) << stat.status().ToString();
    index.files.push_back(*stat);
    IndexedSample sample;
    sample.size = stat->size;
    sample.file = static_cast<uint32_t>(i);
    index.samples.push_back(sample);
    index.keys.push_back(keys[i]);
  }
  EXPECT_TRUE(WriteDatasetIndex(index, dir.Sub("index")).ok());
  return dir.Sub("index");
}

// `labels import` makes a sealed set from JSON lines by key and from an .npy by id: shorter
// rows repeat their first label, a repeated label counts once, -1 is padding.
TEST_F(LabelsCliTest, ImportMakesASealedSetByKeyOrById) {
  const std::string index = WriteKeysIndex(dir_, {"a", "b", "c", "d", "e"});
  ASSERT_TRUE(WriteFileAtomically(dir_.Sub("tags.jsonl"),
                                  "{\"key\": \"c\", \"labels\": [4, 1, 4]}\n"
                                  "\n"
                                  "{\"key\": \"a\", \"labels\": [2]}\n"
                                  "{\"key\": \"e\", \"labels\": [0, 9, 3]}\n")
                  .ok());
  std::string out;
  ASSERT_EQ(Ctl({"labels", "import", "--name", "tags", "--k", "10", "--jsonl",
                 dir_.Sub("tags.jsonl"), "--index", index},
                &out),
            0)
      << out;
  EXPECT_NE(out.find("imported 3 samples into tags (sealed), 1-3 labels each"), std::string::npos)
      << out;
  ASSERT_EQ(Ctl({"-o", "json", "labels", "describe", "tags"}, &out), 0) << out;
  auto info = Json(out);
  EXPECT_EQ(info["state"], "SEALED");
  EXPECT_EQ(info["num_samples"], 3);
  EXPECT_EQ(info["labels_per_sample"], 3);
  ASSERT_EQ(Ctl({"-o", "json", "labels", "get", "tags", "--ids", "0,2,4,1"}, &out), 0) << out;
  auto rows = Json(out)["rows"];
  ASSERT_EQ(rows.size(), 4u) << out;
  EXPECT_EQ(rows[0]["labels"], nlohmann::json::array({2, 2, 2})) << out;  // a
  EXPECT_EQ(rows[1]["labels"], nlohmann::json::array({4, 1, 4})) << out;  // c: 4, 1, padded
  EXPECT_EQ(rows[2]["labels"], nlohmann::json::array({0, 9, 3})) << out;  // e
  EXPECT_EQ(rows[3]["missing"], true) << out;                             // b: not imported

  const std::vector<int64_t> by_id = {5, -1, 6, 7, -1, -1, 1, 1, 8};
  ASSERT_TRUE(WriteNpy(dir_.Sub("ids.npy"), NpyDtype::kInt64, {3, 3}, by_id.data()).ok());
  ASSERT_EQ(
      Ctl({"labels", "import", "--name", "by-id", "--k", "10", "--npy", dir_.Sub("ids.npy")}, &out),
      0)
      << out;
  ASSERT_EQ(Ctl({"-o", "json", "labels", "get", "by-id", "--ids", "0:3"}, &out), 0) << out;
  rows = Json(out)["rows"];
  EXPECT_EQ(rows[0]["labels"], nlohmann::json::array({5, 6})) << out;  // 5, padding, 6
  EXPECT_EQ(rows[1]["labels"], nlohmann::json::array({7, 7})) << out;  // 7 repeated to l = 2
  EXPECT_EQ(rows[2]["labels"], nlohmann::json::array({1, 8})) << out;  // 1 once, then 8
}

// Every problem is counted and the first ones named; nothing is created or sealed.
TEST_F(LabelsCliTest, ImportRefusesBadInputAndLeavesNothing) {
  const std::string index = WriteKeysIndex(dir_, {"a", "b", "c"});
  ASSERT_TRUE(WriteFileAtomically(dir_.Sub("bad.jsonl"),
                                  "{\"key\": \"a\", \"labels\": [1]}\n"
                                  "{\"key\": \"zz\", \"labels\": [1]}\n"
                                  "{\"key\": \"a\", \"labels\": [2]}\n"
                                  "{\"key\": \"b\", \"labels\": [10]}\n"
                                  "{\"key\": \"c\", \"labels\": []}\n"
                                  "not json\n"
                                  "{\"key\": \"c\", \"labels\": [\"x\"]}\n")
                  .ok());
  std::string out;
  EXPECT_EQ(Ctl({"labels", "import", "--name", "bad", "--k", "10", "--jsonl", dir_.Sub("bad.jsonl"),
                 "--index", index},
                &out),
            2)
      << out;
  for (const char* what :
       {"1 keys the dataset index does not have ('zz' line 2)",
        "1 keys given twice ('a' line 3 (first on line 1))", "1 labels outside [0, 10) (10 at 'b'",
        "1 samples without a label ('c' line 5)", "2 lines that are not", "nothing was imported"})
    EXPECT_NE(out.find(what), std::string::npos) << what << " missing in: " << out;
  EXPECT_EQ(Ctl({"labels", "describe", "bad"}, &out), 3) << out;

  EXPECT_EQ(
      Ctl({"labels", "import", "--name", "bad", "--k", "10", "--jsonl", dir_.Sub("bad.jsonl")},
          &out),
      2)
      << out;
  EXPECT_NE(out.find("--index"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"labels", "import", "--name", "bad", "--k", "10"}, &out), 2) << out;

  // A name already taken: refused by the store, and the existing set is left as it was.
  ASSERT_EQ(Ctl({"labels", "create", "--name", "taken", "--k", "10", "--l", "1"}, &out), 0);
  const std::vector<int64_t> ok_rows = {1, 2};
  ASSERT_TRUE(WriteNpy(dir_.Sub("ok.npy"), NpyDtype::kInt64, {2}, ok_rows.data()).ok());
  EXPECT_EQ(
      Ctl({"labels", "import", "--name", "taken", "--k", "10", "--npy", dir_.Sub("ok.npy")}, &out),
      4)
      << out;
  ASSERT_EQ(Ctl({"-o", "json", "labels", "describe", "taken"}, &out), 0) << out;
  EXPECT_EQ(Json(out)["state"], "OPEN");
}

}  // namespace
}  // namespace mlcd
