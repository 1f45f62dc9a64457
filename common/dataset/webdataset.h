// Indexing WebDataset tar shards (format "webdataset", docs/data.md), as img2dataset and the
// webdataset library write them (/work/shared/reference/data-conventions.md):
// - shards are plain (uncompressed) POSIX tars, given as files, directories (their *.tar
//   files, sorted by name) or brace patterns (`train-{00000..00099}.tar`, `{a,b}.tar`);
// - a member's key is its path up to the first '.' of its basename, the rest is its
//   extension (`a/b/000123.jpg` -> key `a/b/000123`, extension `jpg`); members without an
//   extension are ignored; a sample is a run of consecutive members sharing a key;
// - the sample's image is its first .jpg/.jpeg/.png/.webp member (any case); an optional
//   .cls member (a non-negative integer as text) gives its class; other members (.txt,
//   .json, ...) are not indexed;
// - with an annotations.json in the directory of the first shard, each sample's `.labels`
//   and `<attribute>.cls` members are read into the index's annotations
//   (common/dataset/annotation_files.h).
// libarchive walks the tar; each image member's data offset is verified by reading the
// bytes back with pread and comparing them with what libarchive extracted, so a reader can
// later get the image with one positioned read.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/data_roots.h"
#include "common/dataset/dataset_index.h"
#include "common/status.h"

namespace mlcd {

// The most shards one brace pattern may expand to.
constexpr size_t kMaxShardsPerPattern = 1000000;

// Expands the brace groups of `pattern`: numeric ranges `{a..b}` (zero-padded to the width
// of `a` when it has a leading zero) and lists `{x,y,z}`, left to right, in order.
// INVALID_ARGUMENT for an unbalanced or empty group, a range whose end is below its start,
// or more than kMaxShardsPerPattern results.
StatusOr<std::vector<std::string>> ExpandBraces(const std::string& pattern);

// The shard files of `paths`, in order: patterns expanded, directories replaced by their
// sorted *.tar files. NOT_FOUND naming a missing shard (and the pattern it came from);
// INVALID_ARGUMENT for a shard listed twice or a directory without .tar files. With `roots`,
// a symbolic link in a listed directory must resolve under them (PERMISSION_DENIED otherwise;
// common/data_roots.h).
StatusOr<std::vector<std::string>> ExpandShardPaths(const std::vector<std::string>& paths,
                                                    const DataRoots* roots = nullptr);

// Splits a member name into key and extension (false when it has no extension).
bool SplitMemberName(const std::string& name, std::string* key, std::string* extension);

// The annotations.json that declares the annotations of `shards` (expanded): the one in the
// directory of the first shard ("" for no shard).
std::string AnnotationsPathBeside(const std::vector<std::string>& shards);
// Its declarations, or nullopt when it does not exist; INVALID_ARGUMENT naming the file and
// field when it is malformed (ParseAnnotationsJson). Read confined to `roots`.
StatusOr<std::optional<DatasetAnnotations>> ReadDeclaredAnnotations(
    const std::vector<std::string>& shards, const DataRoots* roots = nullptr);

// Indexes the shards of `paths` (see above). FAILED_PRECONDITION for a compressed or
// unreadable shard, DATA_LOSS naming the shard and member where a tar is damaged or cut
// short, INVALID_ARGUMENT for a key seen twice, a bad .cls, or no image at all, and for a bad
// annotation member or a sample missing a declared one. Each shard is
// opened confined to `roots` (else the process's; common/confined_file.h) and libarchive
// reads that verified descriptor.
StatusOr<DatasetIndex> BuildWebDatasetIndex(const std::vector<std::string>& paths,
                                            const DataRoots* roots = nullptr);

}  // namespace mlcd
