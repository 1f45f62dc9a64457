#include "tests/dataset/image_data.h"

#include <fstream>

#include "tests/testing/process.h"

namespace mlcd::testing {

Status MakeImageDatasets(const std::string& out, const ImageDataOptions& o) {
  std::vector<std::string> args = {
      std::string(MLCD_SOURCE_DIR) + "/tests/dataset/make_image_datasets.py",
      "--out",
      out,
      "--count",
      std::to_string(o.count),
      "--format",
      o.format,
      "--shards",
      std::to_string(o.shards),
      "--split",
      o.split,
      "--size",
      std::to_string(o.size)};
  if (o.rgb) args.push_back("--rgb");
  if (o.bad) args.push_back("--bad");
  if (!o.key_prefix.empty()) args.insert(args.end(), {"--key-prefix", o.key_prefix});
  std::string output;
  const int rc = RunCommand("/usr/bin/python3", args, &output);
  if (rc != 0) return Status::Internal("make_image_datasets.py failed: " + output);
  return Status::Ok();
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace mlcd::testing
