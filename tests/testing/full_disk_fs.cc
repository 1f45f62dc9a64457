#include "tests/testing/full_disk_fs.h"

namespace mlcd::testing {
namespace {

rocksdb::IOStatus NoSpace() { return rocksdb::IOStatus::NoSpace("injected: disk full"); }

// A file of the real file system whose writes fail while the disk is "full".
class FullDiskFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FullDiskFile(std::unique_ptr<rocksdb::FSWritableFile> file, const std::atomic<bool>* full)
      : FSWritableFileOwnerWrapper(std::move(file)), full_(full) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (*full_) return NoSpace();
    return FSWritableFileOwnerWrapper::Append(data, o, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v,
                           rocksdb::IODebugContext* dbg) override {
    if (*full_) return NoSpace();
    return FSWritableFileOwnerWrapper::Append(data, o, v, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (*full_) return NoSpace();
    return FSWritableFileOwnerWrapper::Sync(o, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (*full_) return NoSpace();
    return FSWritableFileOwnerWrapper::Fsync(o, dbg);
  }

 private:
  const std::atomic<bool>* full_;
};

}  // namespace

FullDiskFileSystem::FullDiskFileSystem(std::shared_ptr<rocksdb::FileSystem> target)
    : FileSystemWrapper(std::move(target)) {}

rocksdb::IOStatus FullDiskFileSystem::GetFreeSpace(const std::string& path,
                                                   const rocksdb::IOOptions& options,
                                                   uint64_t* free, rocksdb::IODebugContext* dbg) {
  if (full || low) {
    *free = uint64_t{1} << 20;
    return rocksdb::IOStatus::OK();
  }
  return FileSystemWrapper::GetFreeSpace(path, options, free, dbg);
}

rocksdb::IOStatus FullDiskFileSystem::NewWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* file, rocksdb::IODebugContext* dbg) {
  const bool affected = only_suffix.empty() || (name.size() >= only_suffix.size() &&
                                                name.compare(name.size() - only_suffix.size(),
                                                             only_suffix.size(), only_suffix) == 0);
  if (!affected) return FileSystemWrapper::NewWritableFile(name, options, file, dbg);
  if (full && creates_fail) return NoSpace();
  std::unique_ptr<rocksdb::FSWritableFile> opened;
  rocksdb::IOStatus s = FileSystemWrapper::NewWritableFile(name, options, &opened, dbg);
  if (s.ok()) *file = std::make_unique<FullDiskFile>(std::move(opened), &full);
  return s;
}

std::shared_ptr<rocksdb::Env> NewFullDiskEnv(const std::shared_ptr<FullDiskFileSystem>& fs) {
  return std::shared_ptr<rocksdb::Env>(rocksdb::NewCompositeEnv(fs));
}

}  // namespace mlcd::testing
