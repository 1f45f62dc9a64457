#include "common/dataset/feature_keys.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <unordered_map>

#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/format.h"
#include "common/npy.h"

namespace mlcd {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Counts(int64_t keys, int64_t rows, int64_t samples) {
  return " (" + std::to_string(keys) + " keys for " + std::to_string(rows) + " feature rows and " +
         std::to_string(samples) + " samples in the index)";
}

}  // namespace

StatusOr<std::vector<NpyShardRows>> ListNpyShardRows(const std::vector<std::string>& paths,
                                                     const DataRoots* roots) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& p : paths) {
    if (!PathExists(p)) return Status::NotFound("feature path '" + p + "' does not exist");
    if (!IsDirectory(p)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> here;
    std::error_code ec;
    for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.empty() || name[0] == '.' || !EndsWith(name, ".npy") || EndsWith(name, ".ids.npy") ||
          EndsWith(name, ".labels.npy"))
        continue;
      if (roots)
        MLCD_RETURN_IF_ERROR(roots->CheckListedEntry(it->path().string(), "features.paths"));
      std::error_code type_ec;
      if (!it->is_directory(type_ec)) here.push_back(it->path().string());
    }
    if (ec) return Status::InvalidArgument("cannot list '" + p + "': " + ec.message());
    std::sort(here.begin(), here.end());
    files.insert(files.end(), here.begin(), here.end());
  }
  std::vector<NpyShardRows> out;
  for (const auto& f : files) {
    MLCD_ASSIGN_OR_RETURN(MappedNpy npy, MappedNpy::Open(f, roots));
    MLCD_RETURN_IF_ERROR(npy.Expect2d({NpyDtype::kFloat16, NpyDtype::kFloat32}));
    out.push_back({f, npy.rows(), npy.cols()});
  }
  if (out.empty()) return Status::InvalidArgument("no .npy feature shards in the given paths");
  return out;
}

StatusOr<std::vector<int64_t>> AlignFeatureKeys(const DatasetIndex& index,
                                                const std::string& keys_path, int64_t feature_rows,
                                                const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(keys_path, "features.keys", roots));
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  const int64_t num_keys = static_cast<int64_t>(lines.size());
  const std::string counts = Counts(num_keys, feature_rows, index.size());
  if (num_keys != feature_rows || num_keys != index.size()) {
    const int64_t first = std::min(num_keys, std::min(feature_rows, index.size()));
    return Status::InvalidArgument(keys_path + " row " + std::to_string(first) +
                                   ": count mismatch" + counts +
                                   "; the keys file needs one line per feature row, and every "
                                   "sample of the dataset one feature row");
  }
  std::unordered_map<std::string, int64_t> id_of;
  id_of.reserve(index.keys.size());
  for (size_t i = 0; i < index.keys.size(); ++i) id_of.emplace(index.keys[i], i);
  std::vector<int64_t> sample_of_row(lines.size());
  std::vector<int64_t> row_of_sample(index.keys.size(), -1);
  for (size_t r = 0; r < lines.size(); ++r) {
    auto it = id_of.find(lines[r]);
    if (it == id_of.end()) {
      return Status::InvalidArgument(keys_path + " row " + std::to_string(r) + ": key '" +
                                     EscapeControlChars(lines[r]) +
                                     "' is not in the dataset index" + counts);
    }
    int64_t& first = row_of_sample[static_cast<size_t>(it->second)];
    if (first >= 0) {
      return Status::InvalidArgument(keys_path + " row " + std::to_string(r) + ": key '" +
                                     EscapeControlChars(lines[r]) + "' is a duplicate of row " +
                                     std::to_string(first) + counts);
    }
    first = static_cast<int64_t>(r);
    sample_of_row[r] = it->second;
  }
  return sample_of_row;
}

Status CheckFeatureRows(const DatasetIndex& index, const std::vector<NpyShardRows>& shards) {
  int64_t rows = 0;
  for (const auto& s : shards) rows += s.rows;
  if (rows != index.size()) {
    return Status::InvalidArgument(
        "count mismatch: the feature shards (" + shards.front().path +
        (shards.size() > 1 ? " and " + std::to_string(shards.size() - 1) + " more" : "") +
        ") hold " + std::to_string(rows) + " rows but the dataset index has " +
        std::to_string(index.size()) +
        " samples; without a keys file row i is sample i, so the counts must agree (give "
        "clustering.features.keys to align rows by key)");
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> WriteFeatureIds(const std::vector<int64_t>& sample_of_row,
                                                   const std::vector<NpyShardRows>& shards,
                                                   const std::string& dir) {
  MLCD_RETURN_IF_ERROR(MakeConfinedDirs(dir));
  std::vector<std::string> paths;
  size_t begin = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const size_t n = static_cast<size_t>(shards[i].rows);
    if (begin + n > sample_of_row.size()) {
      return Status::Internal("feature ids: shards hold more rows than the alignment");
    }
    const std::string path = dir + "/" + std::to_string(i) + ".ids.npy";
    MLCD_RETURN_IF_ERROR(
        WriteNpy(path, NpyDtype::kInt64, {static_cast<int64_t>(n)}, sample_of_row.data() + begin));
    paths.push_back(path);
    begin += n;
  }
  return paths;
}

}  // namespace mlcd
