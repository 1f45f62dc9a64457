// Dataset annotations (common/dataset/annotations.h, annotation_files.h): annotations.json,
// the WebDataset members `.labels` and `.<attribute>.cls` read while indexing real shards
// (written by ShardWriter with libpng images), the index's annotations.bin, and each refusal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/dataset/annotation_files.h"
#include "common/dataset/dataset_index.h"
#include "common/dataset/make/png_encode.h"
#include "common/dataset/make/shard_writer.h"
#include "common/dataset/webdataset.h"
#include "common/file_util.h"
#include "tests/testing/process.h"

namespace mlcd {
namespace {

using testing::TempDir;

constexpr char kDeclared[] = R"({
  "labels": {"count": 5, "names": ["a", "b", "c", "d", "e"]},
  "attributes": [{"name": "shape", "count": 3}, {"name": "colour", "count": 2,
                  "names": ["red", "blue"]}]
})";

std::string TinyPng(uint8_t value) {
  const std::vector<uint8_t> pixels(4 * 4, value);
  StatusOr<std::string> png = EncodePng(pixels.data(), 4, 4, 1);
  EXPECT_TRUE(png.ok()) << png.status().ToString();
  return png.ok() ? *png : "";
}

// A sample: an image and the given extra members.
struct Sample {
  std::string key;
  std::vector<ShardMember> members;
};

Sample Annotated(const std::string& key, const std::string& labels, int shape, int colour) {
  return {key,
          {{"png", TinyPng(static_cast<uint8_t>(shape * 50))},
           {"labels", labels},
           {"shape.cls", std::to_string(shape) + "\n"},
           {"colour.cls", std::to_string(colour)}}};
}

// Writes `samples` as shards of 2 samples into `dir`, with `declared` as annotations.json
// (none when empty).
void WriteShards(const std::string& dir, const std::vector<Sample>& samples,
                 const std::string& declared) {
  ASSERT_TRUE(MakeDirs(dir).ok());
  ShardWriter writer(dir, 2);
  for (const Sample& s : samples) ASSERT_TRUE(writer.Add(s.key, s.members).ok());
  ASSERT_TRUE(writer.Close().ok());
  if (!declared.empty()) {
    ASSERT_TRUE(WriteFileAtomically(dir + "/" + kAnnotationsJson, declared).ok());
  }
}

std::vector<int32_t> LabelsOf(const LabelSets& sets, int64_t i) {
  return std::vector<int32_t>(sets.begin(i), sets.begin(i) + sets.count(i));
}

TEST(AnnotationsJsonTest, ParsesAndWritesBack) {
  StatusOr<DatasetAnnotations> d = ParseAnnotationsJson(kDeclared, "x.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->labels.num_labels, 5);
  EXPECT_EQ(d->labels.names[4], "e");
  ASSERT_EQ(d->attributes.size(), 2u);
  EXPECT_EQ(d->attributes[0].name, "shape");
  EXPECT_EQ(d->attributes[0].num_classes, 3);
  EXPECT_TRUE(d->attributes[0].class_names.empty());
  EXPECT_EQ(d->attributes[1].class_names, (std::vector<std::string>{"red", "blue"}));
  EXPECT_EQ(d->Describe(), "5 labels; attributes shape (3), colour (2)");
  StatusOr<DatasetAnnotations> again = ParseAnnotationsJson(AnnotationsJson(*d), "y.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(AnnotationsJson(*again), AnnotationsJson(*d));
  // Only attributes, only labels.
  EXPECT_TRUE(ParseAnnotationsJson(R"({"attributes": [{"name": "a_1", "count": 1}]})", "x").ok());
  EXPECT_TRUE(ParseAnnotationsJson(R"({"labels": {"count": 1}})", "x").ok());
}

TEST(AnnotationsJsonTest, RefusesWhatIsWrongNamingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1]", "is not a JSON object"},
      {"{\"label\": {\"count\": 2}}", "unknown key 'label'"},
      {"{\"labels\": {\"count\": 0}}", "labels.count must be an integer in [1, "},
      {"{\"labels\": {\"count\": 2.5}}", "labels.count"},
      {"{\"labels\": {\"count\": 2, \"names\": [\"a\"]}}", "list of 2 strings"},
      {"{\"labels\": {\"count\": 2, \"colour\": 1}}", "unknown key 'colour'"},
      {"{\"attributes\": {}}", "attributes must be a list"},
      {"{\"attributes\": [{\"name\": \"Shape\", \"count\": 2}]}", "attributes[0].name must be"},
      {"{\"attributes\": [{\"count\": 2}]}", "attributes[0].name must be"},
      {"{\"attributes\": [{\"name\": \"s\", \"count\": 2}, {\"name\": \"s\", \"count\": 3}]}",
       "attributes[1].name 's' is listed twice"},
      {"{\"attributes\": [{\"name\": \"s\", \"count\": 4194304}]}",
       "attributes[0].count must be an integer in [1, 1048576]"},
  };
  for (const auto& [text, message] : cases) {
    StatusOr<DatasetAnnotations> d = ParseAnnotationsJson(text, "ann.json");
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(d.status().message().find("ann.json"), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find(message), std::string::npos) << d.status().message();
  }
}

TEST(AnnotationMembersTest, ParsesLabelsAndAttributes) {
  StatusOr<DatasetAnnotations> d = ParseAnnotationsJson(kDeclared, "x.json");
  ASSERT_TRUE(d.ok());
  AnnotationMembers members(&*d);
  EXPECT_TRUE(members.Wants("labels"));
  EXPECT_TRUE(members.Wants("shape.cls"));
  EXPECT_FALSE(members.Wants("texture.cls"));
  EXPECT_FALSE(members.Wants("cls"));
  EXPECT_FALSE(members.Wants("json"));
  DatasetAnnotations out = *d;
  // Separators: spaces, commas, newlines; repeats count once; ids come out sorted.
  ASSERT_TRUE(members.Add("labels", "4, 1\n1 3", "m").ok());
  ASSERT_TRUE(members.Add("shape.cls", "2\n", "m").ok());
  ASSERT_TRUE(members.Add("colour.cls", "0", "m").ok());
  ASSERT_TRUE(members.Finish(true, "s0", &out).ok());
  ASSERT_TRUE(members.Add("labels", "", "m").ok());  // no label
  ASSERT_TRUE(members.Add("shape.cls", "0", "m").ok());
  ASSERT_TRUE(members.Add("colour.cls", "1", "m").ok());
  ASSERT_TRUE(members.Finish(true, "s1", &out).ok());
  // A sample that is not kept (no image) leaves nothing, and needs nothing.
  ASSERT_TRUE(members.Finish(false, "s2", &out).ok());
  ASSERT_TRUE(out.Check(2).ok()) << out.Check(2).ToString();
  EXPECT_EQ(LabelsOf(out.labels, 0), (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(LabelsOf(out.labels, 1), std::vector<int32_t>{});
  EXPECT_EQ(out.attributes[0].values, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(out.attributes[1].values, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(out.Describe(), "5 labels (1.50 per sample); attributes shape (3), colour (2)");

  const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
      {"labels", "1 5", "holds '5': label ids are integers in [0, 5)"},
      {"labels", "1 -2", "holds '-2'"},
      {"labels", "[1]", "holds '[1]'"},
      {"shape.cls", "3", "holds '3': shape is an integer in [0, 3)"},
      {"colour.cls", "blue", "holds 'blue'"},
  };
  for (const auto& [ext, data, message] : bad) {
    AnnotationMembers fresh(&*d);
    Status s = fresh.Add(ext, data, "shard 'a.tar' member 'k." + ext + "'");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << data;
    EXPECT_NE(s.message().find("member 'k." + ext + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
  }
  AnnotationMembers twice(&*d);
  ASSERT_TRUE(twice.Add("shape.cls", "1", "m").ok());
  EXPECT_NE(twice.Add("shape.cls", "1", "m").message().find("second .shape.cls"),
            std::string::npos);
  AnnotationMembers missing(&*d);
  ASSERT_TRUE(missing.Add("labels", "1", "m").ok());
  ASSERT_TRUE(missing.Add("shape.cls", "1", "m").ok());
  Status s = missing.Finish(true, "shard 'a.tar' sample 'k'", &out);
  EXPECT_NE(s.message().find("sample 'k' has no .colour.cls member"), std::string::npos)
      << s.message();
}

TEST(AnnotationValuesTest, CheckRefusesInconsistentValues) {
  DatasetAnnotations a;
  a.labels.num_labels = 3;
  a.labels.offsets = {0, 2, 2};
  a.labels.ids = {0, 2};
  EXPECT_TRUE(a.Check(2).ok());
  EXPECT_FALSE(a.Check(3).ok());
  a.labels.ids = {2, 0};
  EXPECT_NE(a.Check(2).message().find("distinct, ascending"), std::string::npos);
  a.labels.ids = {0, 3};
  EXPECT_NE(a.Check(2).message().find("has label 3"), std::string::npos);
  a.labels.ids = {0, 2};
  a.attributes.push_back(Attribute{"size", 2, {}, {1, 2}});
  EXPECT_NE(a.Check(2).message().find("size = 2, outside [0, 2)"), std::string::npos);
  a.attributes[0].values = {1, 0};
  EXPECT_TRUE(a.Check(2).ok());
  const DatasetAnnotations first = a.Prefix(1);
  EXPECT_TRUE(first.Check(1).ok());
  EXPECT_EQ(first.labels.ids, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(first.attributes[0].values, std::vector<int32_t>{1});
  EXPECT_EQ(a.FindAttribute("size"), &a.attributes[0]);
  EXPECT_EQ(a.FindAttribute("shape"), nullptr);
}

TEST(AnnotatedShardsTest, IndexedPersistedAndLoaded) {
  TempDir dir;
  const std::string shards = dir.Sub("shards");
  // Members in any order within a sample; a sample without an image is skipped with its
  // annotations; an undeclared annotation-like member is ignored.
  std::vector<Sample> samples = {
      Annotated("k0", "0 4", 0, 1),
      {"k1",
       {{"colour.cls", "0"},
        {"labels", "2"},
        {"png", TinyPng(9)},
        {"texture.cls", "7"},
        {"shape.cls", "2"}}},
      {"orphan", {{"labels", "1"}, {"shape.cls", "1"}, {"colour.cls", "1"}}},
      Annotated("k3", "", 1, 0),
      Annotated("k4", "3,1", 2, 1),
  };
  WriteShards(shards, samples, kDeclared);
  StatusOr<DatasetIndex> index = BuildWebDatasetIndex({shards});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_EQ(index->size(), 4);
  EXPECT_EQ(index->skipped, 1u);
  const DatasetAnnotations& a = index->annotations;
  ASSERT_TRUE(a.Check(4).ok());
  EXPECT_EQ(a.labels.names[0], "a");
  EXPECT_EQ(LabelsOf(a.labels, 0), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(LabelsOf(a.labels, 1), std::vector<int32_t>{2});
  EXPECT_EQ(LabelsOf(a.labels, 2), std::vector<int32_t>{});
  EXPECT_EQ(LabelsOf(a.labels, 3), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(a.attributes[0].values, (std::vector<int32_t>{0, 2, 1, 2}));
  EXPECT_EQ(a.attributes[1].values, (std::vector<int32_t>{1, 0, 0, 1}));
  EXPECT_NE(index->Describe().find("annotations: 5 labels (1.25 per sample)"), std::string::npos);

  ASSERT_TRUE(WriteDatasetIndex(*index, dir.Sub("idx")).ok());
  StatusOr<DatasetIndex> loaded = LoadDatasetIndex(dir.Sub("idx"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->annotations.labels.offsets, a.labels.offsets);
  EXPECT_EQ(loaded->annotations.labels.ids, a.labels.ids);
  EXPECT_EQ(loaded->annotations.labels.names, a.labels.names);
  ASSERT_EQ(loaded->annotations.attributes.size(), 2u);
  EXPECT_EQ(loaded->annotations.attributes[1].values, a.attributes[1].values);
  EXPECT_EQ(loaded->annotations.attributes[1].class_names, a.attributes[1].class_names);

  // A damaged annotations.bin is refused as damage.
  std::string bin;
  {
    std::ifstream in(dir.Sub("idx/annotations.bin"), std::ios::binary);
    bin.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("idx/annotations.bin"), bin.substr(0, 9)).ok());
  EXPECT_EQ(LoadDatasetIndex(dir.Sub("idx")).status().code(), StatusCode::kDataLoss);
  std::string wrong = bin;
  wrong[wrong.size() - 4] = 7;  // the last colour value out of [0, 2)
  ASSERT_TRUE(WriteFileAtomically(dir.Sub("idx/annotations.bin"), wrong).ok());
  Status s = LoadDatasetIndex(dir.Sub("idx")).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("colour = 7"), std::string::npos) << s.message();

  ::unlink(dir.Sub("idx/annotations.bin").c_str());
  s = LoadDatasetIndex(dir.Sub("idx")).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("no annotations.bin"), std::string::npos) << s.message();

  // Rewriting the index without annotations removes them.
  index->annotations = DatasetAnnotations();
  ASSERT_TRUE(WriteDatasetIndex(*index, dir.Sub("idx")).ok());
  loaded = LoadDatasetIndex(dir.Sub("idx"));
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->annotations.empty());
}

TEST(AnnotatedShardsTest, WithoutAnnotationsJsonTheMembersAreIgnored) {
  TempDir dir;
  WriteShards(dir.Sub("s"), {Annotated("k0", "9 9", 7, 7), Annotated("k1", "x", 0, 0)}, "");
  StatusOr<DatasetIndex> index = BuildWebDatasetIndex({dir.Sub("s")});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->size(), 2);
  EXPECT_TRUE(index->annotations.empty());
}

TEST(AnnotatedShardsTest, RefusalsNameTheShardAndSample) {
  struct Case {
    std::vector<Sample> samples;
    std::string declared, message;
  };
  const std::vector<Case> cases = {
      {{Annotated("k0", "1", 0, 0), {"k1", {{"png", TinyPng(1)}, {"shape.cls", "0"}}}},
       kDeclared,
       "00000.tar' sample 'k1' has no .labels member"},
      {{Annotated("k0", "1", 0, 0), Annotated("k1", "1 9", 0, 0)},
       kDeclared,
       "00000.tar' member 'k1.labels' holds '9'"},
      {{Annotated("k0", "1", 0, 0), Annotated("k1", "1", 0, 0), Annotated("k2", "1", 0, 2)},
       kDeclared,
       "00001.tar' member 'k2.colour.cls' holds '2'"},
      {{Annotated("k0", "1", 0, 0)},
       R"({"labels": {"count": 2}, "attributes": 3})",
       "annotations.json': attributes must be a list"},
      {{Annotated("k0", std::string(20000, '1'), 0, 0)},
       kDeclared,
       "member 'k0.labels' is 20000 bytes, more than 16384"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    WriteShards(dir.Sub("s"), c.samples, c.declared);
    StatusOr<DatasetIndex> index = BuildWebDatasetIndex({dir.Sub("s")});
    ASSERT_FALSE(index.ok()) << c.message;
    EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(index.status().message().find(c.message), std::string::npos)
        << index.status().message();
  }
}

}  // namespace
}  // namespace mlcd
