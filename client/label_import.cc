#include "client/label_import.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "common/dataset/dataset_index.h"
#include "common/format.h"
#include "common/npy.h"

namespace mlcd::cli {
namespace {

// Counts the problems of each kind and keeps the first few of each for the message.
class ProblemLog {
 public:
  void Add(const std::string& kind, const std::string& example) {
    Kind& k = kinds_[kind];
    if (k.count++ < kMaxNamedProblems) k.examples.push_back(example);
  }
  bool empty() const { return kinds_.empty(); }
  // "2 unknown keys ('a' line 3, 'b' line 9); 1 label outside [0, 10) (...)".
  std::string Describe() const {
    std::string text;
    for (const auto& [kind, k] : kinds_) {
      if (!text.empty()) text += "; ";
      text += std::to_string(k.count) + " " + kind + " (";
      for (size_t i = 0; i < k.examples.size(); ++i) text += (i ? ", " : "") + k.examples[i];
      if (k.count > static_cast<int64_t>(k.examples.size())) text += ", ...";
      text += ")";
    }
    return text;
  }

 private:
  struct Kind {
    int64_t count = 0;
    std::vector<std::string> examples;
  };
  std::map<std::string, Kind> kinds_;
};

// One sample's labels, kept in their order without repeats.
struct SampleLabels {
  uint64_t id = 0;
  std::vector<int32_t> labels;
};

// Checks each label against k and drops repeats; false (with the problem logged) when a label
// is out of range or none is left.
bool AddSample(uint64_t id, const std::vector<int64_t>& given, int64_t k, const std::string& where,
               ProblemLog* problems, std::vector<SampleLabels>* out) {
  SampleLabels s;
  s.id = id;
  bool ok = true;
  for (int64_t v : given) {
    if (v < 0) continue;  // padding
    if (v >= k) {
      problems->Add("labels outside [0, " + std::to_string(k) + ")",
                    std::to_string(v) + " at " + where);
      ok = false;
      continue;
    }
    if (std::find(s.labels.begin(), s.labels.end(), static_cast<int32_t>(v)) == s.labels.end())
      s.labels.push_back(static_cast<int32_t>(v));
  }
  if (ok && s.labels.empty()) {
    problems->Add("samples without a label", where);
    ok = false;
  }
  if (ok && static_cast<int64_t>(s.labels.size()) > kMaxImportedLabelsPerSample) {
    problems->Add(
        "samples with more than " + std::to_string(kMaxImportedLabelsPerSample) + " labels", where);
    ok = false;
  }
  if (ok) out->push_back(std::move(s));
  return ok;
}

// The rows, padded to the most labels any sample has by repeating each sample's first label.
ImportedLabels Pack(std::vector<SampleLabels> samples) {
  std::sort(samples.begin(), samples.end(),
            [](const SampleLabels& a, const SampleLabels& b) { return a.id < b.id; });
  ImportedLabels out;
  size_t l = 0, lo = SIZE_MAX, total = 0;
  for (const SampleLabels& s : samples) {
    l = std::max(l, s.labels.size());
    lo = std::min(lo, s.labels.size());
    total += s.labels.size();
  }
  out.l = static_cast<int32_t>(l);
  out.min_labels = static_cast<int64_t>(lo);
  out.max_labels = static_cast<int64_t>(l);
  out.mean_labels = static_cast<double>(total) / static_cast<double>(samples.size());
  out.ids.reserve(samples.size());
  out.labels.reserve(samples.size() * l);
  for (const SampleLabels& s : samples) {
    out.ids.push_back(s.id);
    for (size_t j = 0; j < l; ++j) out.labels.push_back(s.labels[j < s.labels.size() ? j : 0]);
  }
  return out;
}

Status Refusal(const std::string& path, const ProblemLog& problems) {
  return Status::InvalidArgument(path + ": " + problems.Describe() +
                                 "; nothing was imported: fix the file and run the import again");
}

}  // namespace

StatusOr<ImportedLabels> ImportJsonLines(const std::string& path,
                                         const std::vector<std::string>& keys, int64_t k) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open the JSON lines file");
  std::unordered_map<std::string, uint64_t> id_of;
  id_of.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) id_of.emplace(keys[i], i);
  std::unordered_map<uint64_t, int64_t> line_of;  // sample id -> the line that gave it
  ProblemLog problems;
  std::vector<SampleLabels> samples;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(line);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("key") || !j["key"].is_string() ||
        !j.contains("labels") || !j["labels"].is_array()) {
      problems.Add("lines that are not {\"key\": string, \"labels\": [integers]}", where);
      continue;
    }
    std::vector<int64_t> given;
    bool integers = true;
    for (const auto& v : j["labels"]) {
      if (!v.is_number_integer())
        integers = false;
      else
        given.push_back(v.get<int64_t>());
    }
    if (!integers) {
      problems.Add("lines that are not {\"key\": string, \"labels\": [integers]}", where);
      continue;
    }
    const std::string key = j["key"].get<std::string>();
    const std::string named = "'" + EscapeControlChars(key) + "' " + where;
    auto found = id_of.find(key);
    if (found == id_of.end()) {
      problems.Add("keys the dataset index does not have", named);
      continue;
    }
    auto [seen, fresh] = line_of.emplace(found->second, line);
    if (!fresh) {
      problems.Add("keys given twice",
                   named + " (first on line " + std::to_string(seen->second) + ")");
      continue;
    }
    AddSample(found->second, given, k, named, &problems, &samples);
  }
  if (!problems.empty()) return Refusal(path, problems);
  if (samples.empty()) return Status::InvalidArgument(path + ": holds no sample");
  return Pack(std::move(samples));
}

StatusOr<ImportedLabels> ImportNpy(const std::string& path, int64_t k) {
  std::vector<int64_t> shape;
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> values, ReadNpyAsInt64(path, &shape));
  if (shape.empty() || shape.size() > 2)
    return Status::InvalidArgument(path + ": expected an [n] or [n, c] integer array, got " +
                                   std::to_string(shape.size()) + "-d");
  const int64_t n = shape[0], c = shape.size() == 2 ? shape[1] : 1;
  if (n == 0 || c == 0) return Status::InvalidArgument(path + ": holds no sample");
  ProblemLog problems;
  std::vector<SampleLabels> samples;
  samples.reserve(static_cast<size_t>(n));
  std::vector<int64_t> row(static_cast<size_t>(c));
  for (int64_t i = 0; i < n; ++i) {
    std::copy(values.begin() + i * c, values.begin() + (i + 1) * c, row.begin());
    AddSample(static_cast<uint64_t>(i), row, k, "sample " + std::to_string(i), &problems, &samples);
  }
  if (!problems.empty()) return Refusal(path, problems);
  return Pack(std::move(samples));
}

StatusOr<ImportedLabels> ReadImportSource(const ImportSource& args) {
  if (args.k < 1 || args.k > std::numeric_limits<int32_t>::max())
    return Status::InvalidArgument("--k " + std::to_string(args.k) + " must be in [1, 2^31-1]");
  if (args.jsonl_path.empty() == args.npy_path.empty())
    return Status::InvalidArgument(
        "give the labels either by sample key (--jsonl F.jsonl with --index DIR, the dataset "
        "index that numbers the samples) or by sample id (--npy F.npy)");
  if (!args.npy_path.empty()) {
    if (!args.index_dir.empty())
      return Status::InvalidArgument("--index is for --jsonl; --npy rows are sample ids");
    return ImportNpy(args.npy_path, args.k);
  }
  if (args.index_dir.empty())
    return Status::InvalidArgument(
        "--jsonl matches keys through a dataset index: pass --index DIR (mlcdctl dataset index)");
  MLCD_ASSIGN_OR_RETURN(DatasetIndex index, LoadDatasetIndex(args.index_dir));
  return ImportJsonLines(args.jsonl_path, index.keys, args.k);
}

Status ParseMetaEntries(const std::vector<std::string>& entries,
                        std::map<std::string, std::string>* metadata) {
  for (const auto& kv : entries) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("--meta '" + kv + "' must be key=value");
    (*metadata)[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return Status::Ok();
}

}  // namespace mlcd::cli
