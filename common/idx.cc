#include "common/idx.h"

#include <zlib.h>

#include "common/file_util.h"

namespace mlcd {
namespace {

// Reads the whole (possibly gzipped) file: gzread passes plain files through unchanged.
StatusOr<std::string> ReadMaybeGzipped(const std::string& path) {
  if (!PathExists(path)) return Status::NotFound(path + ": no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::InvalidArgument(path + ": cannot open");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    return Status::DataLoss(path + ": corrupt gzip data: " + (msg ? msg : "unknown error"));
  return out;
}

uint32_t BigEndian32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8) |
         static_cast<uint8_t>(s[at + 3]);
}

}  // namespace

StatusOr<IdxImages> ReadIdxImages(const std::string& path, int64_t limit) {
  MLCD_ASSIGN_OR_RETURN(std::string data, ReadMaybeGzipped(path));
  if (data.size() < 16 || BigEndian32(data, 0) != 0x00000803)
    return Status::InvalidArgument(path + ": not an IDX image file (magic 0x00000803)");
  IdxImages images;
  images.count = BigEndian32(data, 4);
  images.rows = static_cast<int>(BigEndian32(data, 8));
  images.cols = static_cast<int>(BigEndian32(data, 12));
  size_t per_image = static_cast<size_t>(images.rows) * images.cols;
  if (data.size() < 16 + per_image * images.count)
    return Status::DataLoss(path + ": truncated: header says " + std::to_string(images.count) +
                            " images");
  if (limit > 0 && limit < images.count) images.count = limit;
  images.pixels.assign(data.begin() + 16, data.begin() + 16 + per_image * images.count);
  return images;
}

StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, int64_t limit) {
  MLCD_ASSIGN_OR_RETURN(std::string data, ReadMaybeGzipped(path));
  if (data.size() < 8 || BigEndian32(data, 0) != 0x00000801)
    return Status::InvalidArgument(path + ": not an IDX label file (magic 0x00000801)");
  int64_t count = BigEndian32(data, 4);
  if (data.size() < 8 + static_cast<size_t>(count))
    return Status::DataLoss(path + ": truncated: header says " + std::to_string(count) + " labels");
  if (limit > 0 && limit < count) count = limit;
  return std::vector<uint8_t>(data.begin() + 8, data.begin() + 8 + count);
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
