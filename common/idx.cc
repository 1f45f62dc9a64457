#include "common/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/limits.h"

namespace mlcd {
namespace {

// Reads at most `max_bytes` of a (possibly gzipped) file, decompressing no more: gzread passes
// plain files through unchanged. `*more` tells whether the file holds bytes beyond them.
StatusOr<std::string> ReadMaybeGzipped(gzFile f, const std::string& path, size_t max_bytes,
                                       bool* more) {
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while (out.size() < max_bytes) {
    const size_t want = std::min(sizeof(buf), max_bytes - out.size());
    n = gzread(f, buf, static_cast<unsigned>(want));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  if (more) *more = n > 0 && gzread(f, buf, 1) == 1;
  int err = 0;
  const char* msg = gzerror(f, &err);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    return Status::DataLoss(path + ": corrupt gzip data: " + (msg ? msg : "unknown error"));
  return out;
}

// Closes the gzFile at scope end.
struct GzCloser {
  gzFile f;
  ~GzCloser() {
    if (f) gzclose(f);
  }
};

uint32_t BigEndian32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8) |
         static_cast<uint8_t>(s[at + 3]);
}

// Reads the header (`header_bytes`), then the `item_bytes` * count bytes of the first `limit`
// items (all when 0), never more: a crafted header cannot make the reader allocate or
// decompress beyond kMaxIdxBytes.
struct IdxData {
  std::string header;
  std::string body;
  uint64_t count = 0;  // items kept
};
StatusOr<IdxData> ReadIdx(const std::string& path, uint32_t magic, size_t header_bytes,
                          const char* what, uint64_t item_bytes_from_header(const std::string&),
                          int64_t limit) {
  // Opened confined (the process's roots, if any), then read through the descriptor.
  StatusOr<UniqueFd> fd = OpenConfinedRead(path, "path");
  if (!fd.ok()) {
    if (fd.status().code() == StatusCode::kNotFound)
      return Status::NotFound(path + ": no such file");
    return fd.status();
  }
  GzCloser file{gzdopen(fd->get(), "rb")};
  if (!file.f) return Status::InvalidArgument(path + ": cannot open");
  fd->release();  // gzclose closes it
  IdxData d;
  MLCD_ASSIGN_OR_RETURN(d.header, ReadMaybeGzipped(file.f, path, header_bytes, nullptr));
  if (d.header.size() < header_bytes || BigEndian32(d.header, 0) != magic) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", magic);
    return Status::InvalidArgument(path + ": not an IDX " + what + " file (magic " + hex + ")");
  }
  const uint64_t count = BigEndian32(d.header, 4);
  const uint64_t item_bytes = item_bytes_from_header(d.header);
  // Both factors are below 2^32 and item_bytes below 2^64 / 2^32 is checked: no overflow.
  if (item_bytes == 0 || item_bytes > kMaxIdxBytes) {
    return Status::InvalidArgument(path + ": IDX header gives " + std::to_string(item_bytes) +
                                   " bytes per item; at most " + std::to_string(kMaxIdxBytes) +
                                   " and at least 1 are read");
  }
  d.count =
      (limit > 0 && static_cast<uint64_t>(limit) < count) ? static_cast<uint64_t>(limit) : count;
  if (d.count > kMaxIdxBytes / item_bytes) {
    return Status::InvalidArgument(path + ": IDX header gives " + std::to_string(count) + " " +
                                   what + " items of " + std::to_string(item_bytes) +
                                   " bytes; more than the " + std::to_string(kMaxIdxBytes) +
                                   " bytes an IDX file may hold here (give a limit)");
  }
  const size_t body_bytes = static_cast<size_t>(d.count * item_bytes);
  MLCD_ASSIGN_OR_RETURN(d.body, ReadMaybeGzipped(file.f, path, body_bytes, nullptr));
  if (d.body.size() < body_bytes) {
    return Status::DataLoss(path + ": truncated: header says " + std::to_string(count) + " " +
                            what + " items, the file holds " +
                            std::to_string(d.body.size() / item_bytes));
  }
  return d;
}

uint64_t ImageBytes(const std::string& header) {
  return static_cast<uint64_t>(BigEndian32(header, 8)) * BigEndian32(header, 12);
}
uint64_t LabelBytes(const std::string&) { return 1; }

}  // namespace

StatusOr<IdxImages> ReadIdxImages(const std::string& path, int64_t limit) {
  MLCD_ASSIGN_OR_RETURN(IdxData d, ReadIdx(path, 0x00000803, 16, "image", ImageBytes, limit));
  const uint32_t rows = BigEndian32(d.header, 8), cols = BigEndian32(d.header, 12);
  if (rows > kMaxIdxImageSide || cols > kMaxIdxImageSide) {
    return Status::InvalidArgument(path + ": IDX images of " + std::to_string(rows) + " x " +
                                   std::to_string(cols) + " pixels; at most " +
                                   std::to_string(kMaxIdxImageSide) + " per side");
  }
  IdxImages images;
  images.count = static_cast<int64_t>(d.count);
  images.rows = static_cast<int>(rows);
  images.cols = static_cast<int>(cols);
  images.pixels.assign(d.body.begin(), d.body.end());
  return images;
}

StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, int64_t limit) {
  MLCD_ASSIGN_OR_RETURN(IdxData d, ReadIdx(path, 0x00000801, 8, "label", LabelBytes, limit));
  return std::vector<uint8_t>(d.body.begin(), d.body.end());
}
Status FindMnistSplit(const std::string& dir, const std::string& split, std::string* images_path,
                      std::string* labels_path) {
  std::string prefix;
  if (split == "train")
    prefix = "train";
  else if (split == "test" || split == "t10k")
    prefix = "t10k";
  else
    return Status::InvalidArgument("unknown split '" + split + "'; expected train or test");
  for (const char* ext : {".gz", ""}) {
    std::string images = dir + "/" + prefix + "-images-idx3-ubyte" + ext;
    std::string labels = dir + "/" + prefix + "-labels-idx1-ubyte" + ext;
    if (PathExists(images) && PathExists(labels)) {
      *images_path = images;
      *labels_path = labels;
      return Status::Ok();
    }
  }
  return Status::NotFound(
      "no " + prefix + "-images-idx3-ubyte(.gz) / " + prefix + "-labels-idx1-ubyte(.gz) in " + dir +
      (dir == kFashionMnistDir ? " (install the Debian package dataset-fashion-mnist)" : ""));
}

}  // namespace mlcd
