// Whether the label store's storage can take writes (disk full).
//
// Writes are refused (UNAVAILABLE) while the data directory's file system has less than
// min_free_bytes free, checked through RocksDB's own Env before each write: RocksDB then never
// meets a full disk in its WAL, which it cannot resume from in-process (Debian's build even
// asserts on the failed WAL writer at close). The refusal clears by itself once space returns
// (Poll, from the storage's background thread). A write that fails anyway (an I/O error, a
// disk filled between the check and the write) marks the storage failed too; Poll then tries
// rocksdb::DB::Resume, and when that cannot help the failure stays until a restart.
// Health checks report NOT_SERVING while Get() is not OK.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace mlcd::labelstore {

class StorageHealth {
 public:
  StorageHealth(rocksdb::Env* env, std::string dir, uint64_t min_free_bytes);

  // Before a write: UNAVAILABLE (and failed) when the disk is (nearly) full.
  Status CheckSpace();
  // A write's status: UNAVAILABLE (an I/O or space error) marks the storage failed.
  Status Checked(Status status);
  // OK, or UNAVAILABLE saying what failed and whether it clears by itself.
  Status Get() const;
  // Re-checks the space after a space refusal; after a failed write, calls `resume` (true when
  // writes work again).
  void Poll(const std::function<bool()>& resume);
  // A write failed inside RocksDB (its WAL may be unusable: do not sync or close it).
  bool write_failed() const;

 private:
  rocksdb::Env* env_;
  const std::string dir_;
  const uint64_t min_free_bytes_;
  mutable Mutex mu_;
  std::string failure_ GUARDED_BY(mu_);  // empty = healthy
  bool write_failed_ GUARDED_BY(mu_) = false;
};

}  // namespace mlcd::labelstore
