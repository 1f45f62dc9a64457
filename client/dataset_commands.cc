// mlcdctl dataset index|show: build and inspect dataset indexes (common/dataset/,
// docs/data.md). The index is built on this machine, reading the dataset's files directly;
// build it where the files are (shared storage in a cluster) and give its directory as the
// job's dataset.index.
//
//   mlcdctl dataset index --format webdataset --path 'shards/train-{00000..00099}.tar' --out idx
//   mlcdctl dataset index --format image-folder --path photos/ --out idx
//   mlcdctl dataset show idx            # counts, classes, fingerprint check
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

#include "client/cli.h"
#include "common/dataset/dataset_index.h"
#include "common/enums.h"

namespace mlcd::cli {
namespace {

struct IndexOptions {
  std::string format;
  std::vector<std::string> paths;
  std::string out;
};

void PrintIndex(const Context& ctx, const DatasetIndex& index, const std::string& dir,
                double seconds) {
  if (ctx.format() == OutputFormat::kJson) {
    nlohmann::json j = {{"index", dir},
                        {"format", DatasetFormatName(index.format)},
                        {"samples", index.samples.size()},
                        {"files", index.files.size()},
                        {"classes", index.classes.size()},
                        {"skipped", index.skipped}};
    if (seconds >= 0) j["seconds"] = seconds;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("index     %s\n", dir.c_str());
  std::printf("dataset   %s\n", index.Describe().c_str());
  if (index.skipped) {
    std::printf("skipped   %llu files or samples without an image\n",
                static_cast<unsigned long long>(index.skipped));
  }
  if (seconds >= 0) std::printf("built in  %s\n", FormatDuration(seconds).c_str());
}

int RunIndex(Context& ctx, const IndexOptions& o) {
  StatusOr<DatasetFormat> format = ParseDatasetFormat(o.format);
  if (!format.ok()) return ctx.Fail(format.status());
  const auto start = std::chrono::steady_clock::now();
  StatusOr<DatasetIndex> index = BuildDatasetIndex(*format, o.paths);
  if (!index.ok()) return ctx.Fail(index.status());
  Status written = WriteDatasetIndex(*index, o.out);
  if (!written.ok()) return ctx.Fail(written);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintIndex(ctx, *index, o.out, seconds);
  return kExitOk;
}

int RunShow(Context& ctx, const std::string& dir) {
  StatusOr<DatasetIndex> index = LoadDatasetIndex(dir, /*check_fingerprint=*/true);
  if (!index.ok()) return ctx.Fail(index.status());
  PrintIndex(ctx, *index, dir, -1);
  if (ctx.format() == OutputFormat::kText) {
    std::printf("files     unchanged since indexing (sizes and mtimes match)\n");
  }
  return kExitOk;
}

CommandRegistration reg(35, [](CLI::App& app, Context& ctx) {
  auto* dataset = app.add_subcommand(
      "dataset", "Dataset indexes: the persisted list of images that fixes every sample id");
  dataset->require_subcommand(1);
  auto o = std::make_shared<IndexOptions>();
  auto* index = dataset->add_subcommand(
      "index",
      "Index an image folder or WebDataset shards (libarchive records each member's offset).\n"
      "  mlcdctl dataset index --format webdataset --path 'train-{00000..00099}.tar' --out IDX\n"
      "  mlcdctl dataset index --format image-folder --path photos/ --out IDX");
  index->add_option("--format", o->format, "image-folder or webdataset")->required();
  index
      ->add_option("--path", o->paths,
                   "image-folder: the root; webdataset: shards, directories of .tar files or "
                   "brace patterns (repeatable)")
      ->required();
  index->add_option("--out", o->out, "directory to write the index into")->required();
  index->callback([&ctx, o] { ctx.exit_code = RunIndex(ctx, *o); });
  auto dir = std::make_shared<std::string>();
  auto* show = dataset->add_subcommand(
      "show", "Describe an index and check its fingerprint against the dataset's files");
  show->add_option("dir", *dir, "index directory")->required();
  show->callback([&ctx, dir] { ctx.exit_code = RunShow(ctx, *dir); });
});

}  // namespace
}  // namespace mlcd::cli
