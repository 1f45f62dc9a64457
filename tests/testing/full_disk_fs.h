// A RocksDB file layer that plays a full disk on demand (disk full), so tests of the
// label store and the coordinator meet "no space" deterministically without a mount. While
// `full` is set, appending to / syncing a file (and creating one, unless creates_fail is
// cleared) fails with IOStatus::NoSpace and GetFreeSpace reports 1 MiB; otherwise every call goes to the real file system underneath.
// Use it as a service's injected Env: NewFullDiskEnv(fs).
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>
#include <string>

namespace mlcd::testing {

class FullDiskFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit FullDiskFileSystem(
      std::shared_ptr<rocksdb::FileSystem> target = rocksdb::FileSystem::Default());
  const char* Name() const override { return "FullDiskFileSystem"; }

  // Set to play a full disk; clear to give the space back.
  std::atomic<bool> full{false};
  // Set to report 1 MiB free while writes still work (a disk below a service's reserve).
  std::atomic<bool> low{false};
  // While full: whether creating a file fails too, or (as on a real full disk, where an empty
  // file still fits) only writing to it does.
  std::atomic<bool> creates_fail{true};
  // Non-empty: only files whose name ends with this are on the full disk (e.g. ".log", the
  // WAL: RocksDB then opens, but no write of state gets through). Set before files are made.
  std::string only_suffix;

  rocksdb::IOStatus GetFreeSpace(const std::string& path, const rocksdb::IOOptions& options,
                                 uint64_t* free, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* dbg) override;
};

// An Env whose files go through `fs` (keep `fs` to switch it).
std::shared_ptr<rocksdb::Env> NewFullDiskEnv(const std::shared_ptr<FullDiskFileSystem>& fs);

}  // namespace mlcd::testing
