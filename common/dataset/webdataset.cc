#include "common/dataset/webdataset.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <unordered_map>

#include "common/confined_file.h"
#include "common/dataset/annotation_files.h"
#include "common/file_util.h"
#include "common/format.h"

namespace mlcd {
namespace {

// How far past a member's header position its data may start (pax and GNU long-name
// headers come first), in 512-byte tar blocks.
constexpr int kMaxHeaderBlocks = 2048;
constexpr size_t kTarBlock = 512;
// The largest .cls member read (a class number as text).
constexpr int64_t kMaxClsBytes = 64;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool IsDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The alternatives of one brace group's body: "00..12" or "a,b,c".
StatusOr<std::vector<std::string>> GroupAlternatives(const std::string& body,
                                                     const std::string& pattern) {
  const size_t dots = body.find("..");
  if (dots != std::string::npos) {
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    if (!IsDigits(a) || !IsDigits(b) || a.size() > 18 || b.size() > 18) {
      return Status::InvalidArgument("brace range {" + body + "} in '" + pattern +
                                     "' must be {first..last} with decimal numbers");
    }
    const uint64_t lo = std::stoull(a), hi = std::stoull(b);
    if (hi < lo) {
      return Status::InvalidArgument("brace range {" + body + "} in '" + pattern +
                                     "' ends below its start");
    }
    if (hi - lo >= kMaxShardsPerPattern) {
      return Status::InvalidArgument("brace range {" + body + "} in '" + pattern +
                                     "' expands to more than " +
                                     std::to_string(kMaxShardsPerPattern) + " shards");
    }
    const size_t width = a.size() > 1 && a[0] == '0' ? a.size() : 0;
    std::vector<std::string> out;
    for (uint64_t v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(std::move(s));
    }
    return out;
  }
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = body.find(',', start);
    out.push_back(body.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  const size_t close_first = pattern.find('}');
  if (open == std::string::npos) {
    if (close_first != std::string::npos) {
      return Status::InvalidArgument("'" + pattern + "' has a '}' without a '{'");
    }
    return std::vector<std::string>{pattern};
  }
  const size_t close = pattern.find('}', open);
  if (close == std::string::npos || pattern.find('{', open + 1) < close) {
    return Status::InvalidArgument("'" + pattern +
                                   "' has an unbalanced or nested brace group; write ranges "
                                   "as {00000..00099} and lists as {a,b}");
  }
  const std::string body = pattern.substr(open + 1, close - open - 1);
  if (body.empty()) return Status::InvalidArgument("'" + pattern + "' has an empty {} group");
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> alternatives, GroupAlternatives(body, pattern));
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> tails, ExpandBraces(pattern.substr(close + 1)));
  if (alternatives.size() * tails.size() > kMaxShardsPerPattern) {
    return Status::InvalidArgument("'" + pattern + "' expands to more than " +
                                   std::to_string(kMaxShardsPerPattern) + " shards");
  }
  std::vector<std::string> out;
  out.reserve(alternatives.size() * tails.size());
  const std::string head = pattern.substr(0, open);
  for (const auto& alt : alternatives) {
    for (const auto& tail : tails) out.push_back(head + alt + tail);
  }
  return out;
}

StatusOr<std::vector<std::string>> ExpandShardPaths(const std::vector<std::string>& paths,
                                                    const DataRoots* roots) {
  namespace fs = std::filesystem;
  std::vector<std::string> shards;
  std::set<std::string> seen;
  for (const std::string& p : paths) {
    MLCD_ASSIGN_OR_RETURN(std::vector<std::string> expanded, ExpandBraces(p));
    for (const std::string& e : expanded) {
      std::vector<std::string> here;
      // A shard of a brace pattern may be a link even where the pattern's directory is not.
      if (roots) MLCD_RETURN_IF_ERROR(roots->CheckListedEntry(e, "dataset"));
      if (IsDirectory(e)) {
        std::error_code ec;
        for (fs::directory_iterator it(e, ec), end; !ec && it != end; it.increment(ec)) {
          if (roots) MLCD_RETURN_IF_ERROR(roots->CheckListedEntry(it->path().string(), "dataset"));
          std::error_code type_ec;
          if (it->is_regular_file(type_ec) && Lower(it->path().extension().string()) == ".tar")
            here.push_back(it->path().string());
        }
        if (ec) return Status::FailedPrecondition("cannot list '" + e + "': " + ec.message());
        if (here.empty()) {
          return Status::InvalidArgument("directory '" + e + "' holds no .tar shard");
        }
        std::sort(here.begin(), here.end());
      } else if (PathExists(e)) {
        here.push_back(e);
      } else {
        return Status::NotFound("shard '" + e + "' does not exist" +
                                (e == p ? std::string() : " (from '" + p + "')"));
      }
      for (auto& s : here) {
        std::error_code ec;
        const std::string canonical = fs::weakly_canonical(s, ec).string();
        if (!seen.insert(canonical).second) {
          return Status::InvalidArgument("shard '" + s + "' is listed twice");
        }
        shards.push_back(std::move(s));
      }
    }
  }
  if (shards.empty()) return Status::InvalidArgument("no webdataset shards given");
  return shards;
}

bool SplitMemberName(const std::string& name, std::string* key, std::string* extension) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  *key = name.substr(0, dot);
  *extension = name.substr(dot + 1);
  return !extension->empty();
}

namespace {

struct ArchiveDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Indexes shards one after another into one DatasetIndex.
class ShardIndexer {
 public:
  // Shards are opened confined to `roots` (null: the process's, if any). `declared` (the
  // annotations.json beside the shards; null = none) says which annotation members to read.
  ShardIndexer(DatasetIndex* index, const DataRoots* roots, const DatasetAnnotations* declared)
      : index_(index), roots_(roots) {
    if (declared != nullptr && !declared->empty()) {
      members_ = std::make_unique<AnnotationMembers>(declared);
      index_->annotations = *declared;
    }
  }
  Status IndexShard(const std::string& path);

 private:
  // The sample being collected (consecutive members with one key).
  struct Pending {
    std::string key;
    bool has_image = false;
    IndexedSample sample;
  };
  Status Flush(const std::string& shard);
  Status OnMember(struct archive* a, struct archive_entry* entry, int fd, const std::string& shard,
                  uint32_t file);
  StatusOr<uint64_t> LocateData(int fd, uint64_t header_pos, const std::string& data,
                                uint64_t file_size, const std::string& where);

  DatasetIndex* index_;
  const DataRoots* roots_;
  std::unordered_map<std::string, std::string> seen_;  // key -> shard it was in
  std::unique_ptr<AnnotationMembers> members_;         // null: no annotations declared
  Pending pending_;
  bool active_ = false;
};

Status ShardIndexer::Flush(const std::string& shard) {
  if (!active_) return Status::Ok();
  active_ = false;
  if (members_) {
    MLCD_RETURN_IF_ERROR(members_->Finish(pending_.has_image,
                                          "shard '" + EscapeControlChars(shard) + "' sample '" +
                                              EscapeControlChars(pending_.key) + "'",
                                          &index_->annotations));
  }
  if (!pending_.has_image) {
    ++index_->skipped;
    return Status::Ok();
  }
  auto [it, inserted] = seen_.emplace(pending_.key, shard);
  if (!inserted) {
    return Status::InvalidArgument("sample key '" + pending_.key + "' occurs twice (in '" +
                                   it->second + "' and in '" + shard +
                                   "'); keys must be unique across the shards of a dataset");
  }
  index_->samples.push_back(pending_.sample);
  index_->keys.push_back(pending_.key);
  return Status::Ok();
}

StatusOr<uint64_t> ShardIndexer::LocateData(int fd, uint64_t header_pos, const std::string& data,
                                            uint64_t file_size, const std::string& where) {
  std::string back(data.size(), '\0');
  for (int block = 1; block <= kMaxHeaderBlocks; ++block) {
    const uint64_t offset = header_pos + block * kTarBlock;
    if (offset + data.size() > file_size) break;
    if (data.empty()) return offset;
    const ssize_t got = ::pread(fd, back.data(), back.size(), static_cast<off_t>(offset));
    if (got == static_cast<ssize_t>(back.size()) && back == data) return offset;
  }
  return Status::DataLoss(where +
                          ": the member's bytes are not stored contiguously after its header "
                          "(a sparse or unusual tar member); rewrite the shard with plain tar");
}

Status ShardIndexer::OnMember(struct archive* a, struct archive_entry* entry, int fd,
                              const std::string& shard, uint32_t file) {
  const char* raw_name = archive_entry_pathname(entry);
  const std::string name = raw_name ? raw_name : "";
  // Names come from the data: shown with control characters escaped.
  const std::string where =
      "shard '" + EscapeControlChars(shard) + "' member '" + EscapeControlChars(name) + "'";
  std::string key, extension;
  if (archive_entry_filetype(entry) != AE_IFREG || !SplitMemberName(name, &key, &extension)) {
    return Status::Ok();  // directories, links, members without an extension
  }
  if (!active_ || key != pending_.key) {
    MLCD_RETURN_IF_ERROR(CheckSampleKey(key, where));
    MLCD_RETURN_IF_ERROR(Flush(shard));
    pending_ = Pending{key, false, IndexedSample{}};
    pending_.sample.file = file;
    active_ = true;
  }
  const std::string ext = Lower(extension);
  // The whole extension names the field: "seg.png" is another field than "png".
  const bool image =
      (ext == "jpg" || ext == "jpeg" || ext == "png" || ext == "webp") && !pending_.has_image;
  const bool annotation = members_ && members_->Wants(ext);
  if (!image && ext != "cls" && !annotation) return Status::Ok();
  const int64_t size = archive_entry_size(entry);
  const int64_t max_size = image        ? static_cast<int64_t>(kMaxSampleBytes)
                           : annotation ? members_->MaxBytes(ext)
                                        : kMaxClsBytes;
  if (size < 0 || size > max_size) {
    return Status::InvalidArgument(where + " is " + std::to_string(size) + " bytes, more than " +
                                   std::to_string(max_size));
  }
  const uint64_t header_pos = static_cast<uint64_t>(archive_read_header_position(a));
  std::string data(static_cast<size_t>(size), '\0');
  const la_ssize_t got = size ? archive_read_data(a, data.data(), data.size()) : 0;
  if (got != size) {
    return Status::DataLoss(
        where + " is cut short (" +
        (got < 0 ? std::string(archive_error_string(a) ? archive_error_string(a) : "read error")
                 : std::to_string(got) + " of " + std::to_string(size) + " bytes)") +
        "; the shard is damaged: re-download or rewrite it");
  }
  if (annotation) return members_->Add(ext, data, where);
  if (!image) {
    std::string text = data;
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (!IsDigits(text) || text.size() > 9) {
      return Status::InvalidArgument(where + " must hold a non-negative class number, holds '" +
                                     EscapeControlChars(text) + "'");
    }
    pending_.sample.class_id = std::stoi(text);
    if (static_cast<size_t>(pending_.sample.class_id) >= index_->classes.size()) {
      for (size_t c = index_->classes.size(); c <= static_cast<size_t>(pending_.sample.class_id);
           ++c)
        index_->classes.push_back(std::to_string(c));
    }
    return Status::Ok();
  }
  MLCD_ASSIGN_OR_RETURN(pending_.sample.offset,
                        LocateData(fd, header_pos, data, index_->files[file].size, where));
  pending_.sample.size = static_cast<uint64_t>(size);
  pending_.has_image = true;
  return Status::Ok();
}

Status ShardIndexer::IndexShard(const std::string& path) {
  // Opened confined to the process's roots (if any); libarchive reads this descriptor, so
  // what is indexed is the file that was verified.
  StatusOr<UniqueFd> opened = OpenConfinedRead(path, "dataset shard", roots_);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kPermissionDenied) return opened.status();
    return Status::FailedPrecondition("cannot open shard '" + path +
                                      "': " + opened.status().message());
  }
  FdCloser fd{opened->release()};
  MLCD_ASSIGN_OR_RETURN(IndexedFile file, StatIndexedFile(path));
  const uint32_t file_no = static_cast<uint32_t>(index_->files.size());
  index_->files.push_back(file);
  std::unique_ptr<struct archive, ArchiveDeleter> a(archive_read_new());
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  if (archive_read_open_fd(a.get(), fd.fd, 1 << 16) != ARCHIVE_OK) {
    return Status::FailedPrecondition("cannot read shard '" + path +
                                      "' as a tar: " + archive_error_string(a.get()));
  }
  std::string last = "(start of the shard)";
  while (true) {
    struct archive_entry* entry = nullptr;
    const int r = archive_read_next_header(a.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      const char* err = archive_error_string(a.get());
      return Status::DataLoss("shard '" + path + "' is damaged after member " + last + ": " +
                              (err ? err : "unreadable tar header") +
                              "; re-download or rewrite the shard");
    }
    if (archive_filter_code(a.get(), 0) != ARCHIVE_FILTER_NONE) {
      return Status::FailedPrecondition(
          "shard '" + path + "' is compressed (" + archive_filter_name(a.get(), 0) +
          "); the index reads samples by offset, so shards must be plain .tar: decompress it");
    }
    MLCD_RETURN_IF_ERROR(OnMember(a.get(), entry, fd.fd, path, file_no));
    const char* name = archive_entry_pathname(entry);
    last = std::string("'") + (name ? name : "") + "'";
  }
  return Flush(path);
}

}  // namespace

std::string AnnotationsPathBeside(const std::vector<std::string>& shards) {
  if (shards.empty()) return "";
  return std::filesystem::path(shards[0]).parent_path().append(kAnnotationsJson).string();
}

StatusOr<std::optional<DatasetAnnotations>> ReadDeclaredAnnotations(
    const std::vector<std::string>& shards, const DataRoots* roots) {
  const std::string path = AnnotationsPathBeside(shards);
  if (path.empty() || !PathExists(path)) return std::optional<DatasetAnnotations>();
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(path, "dataset annotations", roots));
  MLCD_ASSIGN_OR_RETURN(DatasetAnnotations declared, ParseAnnotationsJson(text, "'" + path + "'"));
  return std::optional<DatasetAnnotations>(std::move(declared));
}

StatusOr<DatasetIndex> BuildWebDatasetIndex(const std::vector<std::string>& paths,
                                            const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandShardPaths(paths, roots));
  MLCD_ASSIGN_OR_RETURN(std::optional<DatasetAnnotations> declared,
                        ReadDeclaredAnnotations(shards, roots));
  DatasetIndex index;
  index.format = DatasetFormat::kWebDataset;
  index.paths = paths;
  ShardIndexer indexer(&index, roots, declared ? &*declared : nullptr);
  for (const std::string& shard : shards) MLCD_RETURN_IF_ERROR(indexer.IndexShard(shard));
  if (index.samples.empty()) {
    return Status::InvalidArgument("the " + std::to_string(shards.size()) +
                                   " webdataset shard(s) hold no image member (.jpg, .jpeg, "
                                   ".png or .webp)");
  }
  return index;
}

}  // namespace mlcd
