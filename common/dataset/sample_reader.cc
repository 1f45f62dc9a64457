#include "common/dataset/sample_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/confined_file.h"

namespace mlcd {

SampleReader::~SampleReader() {
  for (auto& [file, fd] : open_) ::close(fd);
}

StatusOr<int> SampleReader::Descriptor(uint32_t file, bool* owned) {
  const std::string& path = index_->files[file].path;
  *owned = index_->format != DatasetFormat::kWebDataset;
  if (!*owned) {
    MutexLock lock(&mu_);
    auto it = open_.find(file);
    if (it != open_.end()) return it->second;
  }
  // Opened confined to the process's roots (if any): a file reached through a link swapped
  // in after the index was checked is refused unread.
  StatusOr<UniqueFd> opened = OpenConfinedRead(path, "dataset file");
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kPermissionDenied) return opened.status();
    return Status::FailedPrecondition("cannot open dataset file '" + path +
                                      "': " + opened.status().message());
  }
  const int fd = opened->release();
  if (*owned) return fd;
  MutexLock lock(&mu_);
  if (open_.size() >= kMaxOpenShards) {
    *owned = true;  // the cache is full: this read closes its own descriptor
    return fd;
  }
  auto [it, inserted] = open_.emplace(file, fd);
  if (!inserted) {
    ::close(fd);  // another thread opened it meanwhile
    return it->second;
  }
  return fd;
}

Status SampleReader::Read(int64_t id, std::string* out) {
  if (id < 0 || id >= index_->size()) {
    return Status::OutOfRange("sample id " + std::to_string(id) + " is outside the index (0.." +
                              std::to_string(index_->size() - 1) + ")");
  }
  const IndexedSample& s = index_->samples[static_cast<size_t>(id)];
  bool owned = false;
  MLCD_ASSIGN_OR_RETURN(int fd, Descriptor(s.file, &owned));
  out->resize(s.size);
  size_t done = 0;
  int err = 0;
  while (done < s.size) {
    const ssize_t got =
        ::pread(fd, out->data() + done, s.size - done, static_cast<off_t>(s.offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      err = got < 0 ? errno : 0;
      break;
    }
    done += static_cast<size_t>(got);
  }
  if (owned) ::close(fd);
  if (done < s.size) {
    return Status::DataLoss(
        "sample " + std::to_string(id) + " ('" + index_->keys[static_cast<size_t>(id)] +
        "'): read " + std::to_string(done) + " of " + std::to_string(s.size) + " bytes at offset " +
        std::to_string(s.offset) + " of '" + index_->files[s.file].path + "'" +
        (err ? std::string(": ") + std::strerror(err)
             : std::string(": the file is shorter than when it was indexed")));
  }
  return Status::Ok();
}

}  // namespace mlcd
