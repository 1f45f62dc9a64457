// The dataset index: the persisted list of a dataset's images that fixes every sample id
// (docs/contracts.md, 1): sample i is row i of the index, of the round-0 features, of every
// label set, and the worker's sample i. Each row says where the image's encoded bytes are:
// a file (an image of an image folder, or a tar shard) and a byte range in it, so a reader
// gets a sample with one positioned read and no scan (common/dataset/sample_reader.h).
//
// On disk an index is a directory (docs/data.md, "The index"):
//   manifest.json  version, format, the dataset paths as given, counts
//   files.tsv      one line per source file: path, size in bytes, mtime in ns (the fingerprint)
//   samples.bin    one 24-byte little-endian record per sample: offset u64, size u64,
//                  file u32 (line of files.tsv), class i32 (-1 = none)
//   keys.txt       one sample key per line, in sample order
//   classes.txt    class names, class i on line i (may be empty)
//   annotations.json, annotations.bin   label sets and attributes, when the dataset has them
//                  (common/dataset/annotation_files.h)
// Loading checks the fingerprint against the files: a dataset that changed after the index
// was built is refused (FAILED_PRECONDITION naming the file and what changed), never read
// wrongly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/dataset/annotations.h"
#include "common/enums.h"
#include "common/status.h"

namespace mlcd {

// The format version WriteDatasetIndex writes and LoadDatasetIndex reads.
constexpr int kDatasetIndexVersion = 1;
// At most this many bytes per sample (a larger member is refused when indexing).
constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 30;
// At most this many characters per key; keys hold no control character (CheckSampleKey).
constexpr size_t kMaxSampleKeyLength = 4096;

// A sample key from data (a tar member's name up to its extension, an image's path under the
// folder): at most kMaxSampleKeyLength bytes and no control character (common/format.h's
// HasControlChars): a tab or newline would break the keys files, and ESC, BEL or backspace
// would reach terminals and logs through the messages that name the key.
// INVALID_ARGUMENT naming `what` (e.g. "shard 'a.tar' member 'x.jpg'", given with control
// characters already escaped) and how to fix it.
Status CheckSampleKey(const std::string& key, const std::string& what);

// A file the samples live in, with the size and modification time it had when indexed.
struct IndexedFile {
  std::string path;  // absolute
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// Where sample i's encoded image is: bytes [offset, offset + size) of files[file].
struct IndexedSample {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t file = 0;
  int32_t class_id = -1;  // index into classes, -1 = none
};

struct DatasetIndex {
  DatasetFormat format = DatasetFormat::kImageFolder;
  std::vector<std::string> paths;  // the dataset as given (root, shards or patterns)
  std::vector<IndexedFile> files;
  std::vector<IndexedSample> samples;
  std::vector<std::string> keys;     // keys[i] is sample i's key, unique
  std::vector<std::string> classes;  // class names (evaluation only)
  // Label sets and attributes (webdataset with an annotations.json beside its shards; empty
  // otherwise), one entry per sample.
  DatasetAnnotations annotations;
  // Files or members seen but not indexed (not an image, or no image member), for reports.
  uint64_t skipped = 0;

  int64_t size() const { return static_cast<int64_t>(samples.size()); }
  // "webdataset, 1000 samples in 4 files, 10 classes".
  std::string Describe() const;
};

// Builds the index of a dataset: `paths` is the image folder's root (one path) for
// image-folder, and shard files, directories of *.tar or brace patterns for webdataset
// (common/dataset/webdataset.h). NOT_FOUND / FAILED_PRECONDITION naming a missing or
// unreadable file; INVALID_ARGUMENT when the dataset holds no image or a key twice;
// UNIMPLEMENTED for fashion-mnist (it needs no index). With `roots`, every symbolic link met
// while listing a directory (an image folder's files and class folders, a directory of
// shards) must resolve under them: PERMISSION_DENIED otherwise, the same for a dangling link
// (DataRoots::CheckListedEntry), checked before the link is followed.
StatusOr<DatasetIndex> BuildDatasetIndex(DatasetFormat format,
                                         const std::vector<std::string>& paths,
                                         const DataRoots* roots = nullptr);

// Writes the index into directory `dir` (created when missing; each file atomically,
// manifest.json last, so a directory with a manifest holds a complete index).
Status WriteDatasetIndex(const DatasetIndex& index, const std::string& dir);

// Reads an index directory. With `check_fingerprint`, every source file is stat'ed and
// compared with the fingerprint: FAILED_PRECONDITION naming the file when it is missing or
// its size or mtime changed, with the hint to rebuild the index. NOT_FOUND when `dir` holds
// no manifest.json; DATA_LOSS / INVALID_ARGUMENT naming the file when a part is damaged.
// With `roots` (else the process's, common/confined_file.h), the index's own files are read
// through OpenConfinedRead and every source file the index names must resolve under them
// (checked before the fingerprint stats it): PERMISSION_DENIED as DataRoots::Confine
// otherwise, so an index cannot lead a service outside its data roots.
StatusOr<DatasetIndex> LoadDatasetIndex(const std::string& dir, bool check_fingerprint = true,
                                        const DataRoots* roots = nullptr);

// The fingerprint check alone (LoadDatasetIndex runs it): OK, or FAILED_PRECONDITION naming
// the first changed or missing file.
Status CheckDatasetFingerprint(const DatasetIndex& index);

// Stats `path` into an IndexedFile (absolute path, size, mtime). NOT_FOUND when missing,
// FAILED_PRECONDITION when it is not a regular file or cannot be read.
StatusOr<IndexedFile> StatIndexedFile(const std::string& path);

}  // namespace mlcd
