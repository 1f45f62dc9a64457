#include "common/dataset/dataset_index.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/confined_file.h"
#include "common/dataset/annotation_files.h"
#include "common/dataset/image_folder.h"
#include "common/dataset/little_endian.h"
#include "common/dataset/webdataset.h"
#include "common/file_util.h"
#include "common/format.h"

namespace mlcd {
namespace {

constexpr size_t kSampleRecordBytes = 24;
constexpr char kManifest[] = "manifest.json";
constexpr char kFiles[] = "files.tsv";
constexpr char kSamples[] = "samples.bin";
constexpr char kKeys[] = "keys.txt";
constexpr char kClasses[] = "classes.txt";

std::string Lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Splits `text` into lines (a final newline ends the last line, not a new empty one).
std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

StatusOr<std::vector<IndexedFile>> ParseFiles(const std::string& text, const std::string& name) {
  std::vector<IndexedFile> files;
  const std::vector<std::string> lines = SplitLines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const size_t a = line.find('\t');
    const size_t b = a == std::string::npos ? a : line.find('\t', a + 1);
    if (b == std::string::npos) {
      return Status::DataLoss(name + " line " + std::to_string(i + 1) +
                              ": expected path<TAB>size<TAB>mtime_ns");
    }
    IndexedFile f;
    f.path = line.substr(0, a);
    char* end = nullptr;
    f.size = std::strtoull(line.c_str() + a + 1, &end, 10);
    f.mtime_ns = std::strtoll(line.c_str() + b + 1, &end, 10);
    files.push_back(std::move(f));
  }
  return files;
}

std::string FormatMtime(int64_t ns) {
  char buf[64];
  const time_t secs = static_cast<time_t>(ns / 1000000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string DatasetIndex::Describe() const {
  std::ostringstream s;
  s << DatasetFormatName(format) << ", " << samples.size() << " samples in " << files.size()
    << (files.size() == 1 ? " file" : " files");
  if (!classes.empty()) s << ", " << classes.size() << " classes";
  if (!annotations.empty()) s << ", annotations: " << annotations.Describe();
  return s.str();
}

StatusOr<IndexedFile> StatIndexedFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("'" + path + "' does not exist");
    return Status::FailedPrecondition("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::FailedPrecondition("'" + path + "' is not a regular file");
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return Status::FailedPrecondition("'" + path + "' is not readable: " + std::strerror(errno));
  }
  IndexedFile f;
  char resolved[PATH_MAX];
  f.path = ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
  f.size = static_cast<uint64_t>(st.st_size);
  f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return f;
}

StatusOr<DatasetIndex> BuildDatasetIndex(DatasetFormat format,
                                         const std::vector<std::string>& paths,
                                         const DataRoots* roots) {
  switch (format) {
    case DatasetFormat::kImageFolder:
      if (paths.size() != 1) {
        return Status::InvalidArgument("an image-folder dataset is one root directory; got " +
                                       std::to_string(paths.size()) + " paths");
      }
      return BuildImageFolderIndex(paths[0], roots);
    case DatasetFormat::kWebDataset:
      return BuildWebDatasetIndex(paths, roots);
    case DatasetFormat::kFashionMnist:
      break;
  }
  return Status::Unimplemented(
      "fashion-mnist needs no index: its IDX files are read whole; index image-folder or "
      "webdataset datasets");
}

Status WriteDatasetIndex(const DatasetIndex& index, const std::string& dir) {
  if (index.keys.size() != index.samples.size()) {
    return Status::Internal("dataset index has " + std::to_string(index.keys.size()) +
                            " keys for " + std::to_string(index.samples.size()) + " samples");
  }
  MLCD_RETURN_IF_ERROR(MakeDirs(dir));
  // A rewrite first removes the manifest, so a crash in between leaves no index that mixes
  // old and new parts.
  ::unlink((dir + "/" + kManifest).c_str());
  std::string files;
  for (const auto& f : index.files) {
    files += f.path + "\t" + std::to_string(f.size) + "\t" + std::to_string(f.mtime_ns) + "\n";
  }
  std::string samples;
  samples.reserve(index.samples.size() * kSampleRecordBytes);
  for (const auto& s : index.samples) {
    PutLe(s.offset, 8, &samples);
    PutLe(s.size, 8, &samples);
    PutLe(s.file, 4, &samples);
    PutLe(static_cast<uint32_t>(s.class_id), 4, &samples);
  }
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + kFiles, files));
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + kSamples, samples));
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + kKeys, Lines(index.keys)));
  MLCD_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + kClasses, Lines(index.classes)));
  if (index.annotations.empty()) {
    ::unlink((dir + "/" + kAnnotationsJson).c_str());
    ::unlink((dir + "/" + kAnnotationsBin).c_str());
  } else {
    MLCD_RETURN_IF_ERROR(index.annotations.Check(index.size()).WithContext("dataset index"));
    MLCD_RETURN_IF_ERROR(
        WriteFileAtomically(dir + "/" + kAnnotationsJson, AnnotationsJson(index.annotations)));
    MLCD_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + kAnnotationsBin,
                                             EncodeAnnotationValues(index.annotations)));
  }
  nlohmann::json manifest = {
      {"version", kDatasetIndexVersion},
      {"format", DatasetFormatName(index.format)},
      {"paths", index.paths},
      {"samples", index.samples.size()},
      {"files", index.files.size()},
      {"classes", index.classes.size()},
      {"skipped", index.skipped},
  };
  return WriteFileAtomically(dir + "/" + kManifest, manifest.dump(2) + "\n");
}

namespace {

StatusOr<nlohmann::json> ReadManifest(const std::string& dir, const DataRoots* roots) {
  const std::string path = dir + "/" + kManifest;
  StatusOr<std::string> text = ReadConfinedFile(path, "dataset index", roots);
  if (text.status().code() == StatusCode::kNotFound) {
    return Status::NotFound("'" + dir +
                            "' holds no dataset index (no manifest.json); build one with "
                            "`mlcdctl dataset index --format ... --path ... --out " +
                            dir + "`");
  }
  if (!text.ok()) return text.status();
  nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object() || !m.contains("version") || !m.contains("format") ||
      !m.contains("samples") || !m.contains("files")) {
    return Status::DataLoss(path + " is not a dataset index manifest");
  }
  if (m["version"] != kDatasetIndexVersion) {
    return Status::FailedPrecondition(path + " is index version " + m["version"].dump() +
                                      "; this build reads version " +
                                      std::to_string(kDatasetIndexVersion) + ": rebuild it");
  }
  return m;
}

Status CountMismatch(const std::string& path, const std::string& what, uint64_t got,
                     uint64_t want) {
  return Status::DataLoss(path + " holds " + std::to_string(got) + " " + what +
                          " but manifest.json says " + std::to_string(want) +
                          "; the index is damaged: rebuild it");
}

// The index's annotations.json and annotations.bin, when it has them.
Status LoadAnnotations(const std::string& dir, const DataRoots* roots, DatasetIndex* index) {
  const std::string json_path = dir + "/" + kAnnotationsJson;
  StatusOr<std::string> text = ReadConfinedFile(json_path, "dataset index", roots);
  if (text.status().code() == StatusCode::kNotFound) return Status::Ok();
  if (!text.ok()) return text.status();
  StatusOr<DatasetAnnotations> declared = ParseAnnotationsJson(*text, json_path);
  if (!declared.ok()) {
    return Status::DataLoss(declared.status().message() + "; the index is damaged: rebuild it");
  }
  StatusOr<std::string> values =
      ReadConfinedFile(dir + "/" + kAnnotationsBin, "dataset index", roots);
  if (values.status().code() == StatusCode::kNotFound) {
    return Status::DataLoss(dir + " has " + kAnnotationsJson + " but no " + kAnnotationsBin +
                            "; the index is damaged: rebuild it");
  }
  if (!values.ok()) return values.status();
  MLCD_RETURN_IF_ERROR(
      DecodeAnnotationValues(*values, index->size(), dir + "/" + kAnnotationsBin, &*declared));
  index->annotations = std::move(*declared);
  return Status::Ok();
}

}  // namespace

StatusOr<DatasetIndex> LoadDatasetIndex(const std::string& dir, bool check_fingerprint,
                                        const DataRoots* roots) {
  // Every file of the index is read confined (`roots`, else the process's).
  if (roots == nullptr) roots = ProcessDataRoots();
  DatasetIndex index;
  MLCD_ASSIGN_OR_RETURN(nlohmann::json m, ReadManifest(dir, roots));
  try {
    MLCD_ASSIGN_OR_RETURN(index.format, ParseDatasetFormat(m["format"].get<std::string>()));
    if (m.contains("paths")) index.paths = m["paths"].get<std::vector<std::string>>();
    if (m.contains("skipped")) index.skipped = m["skipped"].get<uint64_t>();
    const uint64_t num_samples = m["samples"].get<uint64_t>();
    const uint64_t num_files = m["files"].get<uint64_t>();
    MLCD_ASSIGN_OR_RETURN(std::string files_text,
                          ReadConfinedFile(dir + "/" + kFiles, "dataset index", roots));
    MLCD_ASSIGN_OR_RETURN(index.files, ParseFiles(files_text, dir + "/" + kFiles));
    if (index.files.size() != num_files) {
      return CountMismatch(dir + "/" + kFiles, "files", index.files.size(), num_files);
    }
    MLCD_ASSIGN_OR_RETURN(std::string samples,
                          ReadConfinedFile(dir + "/" + kSamples, "dataset index", roots));
    if (samples.size() != num_samples * kSampleRecordBytes) {
      return CountMismatch(dir + "/" + kSamples, "samples", samples.size() / kSampleRecordBytes,
                           num_samples);
    }
    index.samples.resize(num_samples);
    const auto* p = reinterpret_cast<const unsigned char*>(samples.data());
    for (uint64_t i = 0; i < num_samples; ++i, p += kSampleRecordBytes) {
      IndexedSample& s = index.samples[i];
      s.offset = GetLe(p, 8);
      s.size = GetLe(p + 8, 8);
      s.file = static_cast<uint32_t>(GetLe(p + 16, 4));
      s.class_id = static_cast<int32_t>(static_cast<uint32_t>(GetLe(p + 20, 4)));
      if (s.file >= num_files || s.offset + s.size > index.files[s.file].size) {
        return Status::DataLoss(dir + "/" + kSamples + " record " + std::to_string(i) +
                                " points outside its file; the index is damaged: rebuild it");
      }
    }
    MLCD_ASSIGN_OR_RETURN(std::string keys,
                          ReadConfinedFile(dir + "/" + kKeys, "dataset index", roots));
    index.keys = SplitLines(keys);
    if (index.keys.size() != num_samples) {
      return CountMismatch(dir + "/" + kKeys, "keys", index.keys.size(), num_samples);
    }
    MLCD_ASSIGN_OR_RETURN(std::string classes,
                          ReadConfinedFile(dir + "/" + kClasses, "dataset index", roots));
    index.classes = SplitLines(classes);
    MLCD_RETURN_IF_ERROR(LoadAnnotations(dir, roots, &index));
  } catch (const nlohmann::json::exception& e) {
    return Status::DataLoss(dir + "/" + kManifest + ": " + e.what());
  }
  if (roots) {
    for (const IndexedFile& f : index.files)
      MLCD_RETURN_IF_ERROR(roots->Confine(f.path, dir + "/" + kFiles).status());
  }
  if (check_fingerprint) MLCD_RETURN_IF_ERROR(CheckDatasetFingerprint(index));
  return index;
}

Status CheckDatasetFingerprint(const DatasetIndex& index) {
  const std::string hint =
      "; the dataset changed after its index was built: rebuild the index "
      "(mlcdctl dataset index) and the features and label sets made from it";
  for (const auto& f : index.files) {
    StatusOr<IndexedFile> now = StatIndexedFile(f.path);
    if (!now.ok()) {
      return Status::FailedPrecondition("dataset file " + now.status().message() + hint);
    }
    if (now->size != f.size) {
      return Status::FailedPrecondition("dataset file '" + f.path + "' is " +
                                        std::to_string(now->size) + " bytes, was " +
                                        std::to_string(f.size) + hint);
    }
    if (now->mtime_ns != f.mtime_ns) {
      return Status::FailedPrecondition("dataset file '" + f.path + "' was modified at " +
                                        FormatMtime(now->mtime_ns) + " (indexed at mtime " +
                                        FormatMtime(f.mtime_ns) + ")" + hint);
    }
  }
  return Status::Ok();
}

Status CheckSampleKey(const std::string& key, const std::string& what) {
  if (key.size() > kMaxSampleKeyLength) {
    return Status::InvalidArgument(what + ": its sample key is " + std::to_string(key.size()) +
                                   " bytes, more than " + std::to_string(kMaxSampleKeyLength) +
                                   "; rename it");
  }
  if (HasControlChars(key)) {
    return Status::InvalidArgument(what + ": its sample key '" + EscapeControlChars(key) +
                                   "' holds a control character (shown escaped); rename it "
                                   "to printable characters");
  }
  return Status::Ok();
}

}  // namespace mlcd
