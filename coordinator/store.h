// The coordinator's persistent state: its own RocksDB (docs/architecture.md, "Where state lives").
//
// Layout (one column family, keys ordered so each kind is one range):
//   job/<job id>                    -> v1::JobRecord (the job, its rounds, its running gang)
//   request-by/<owner>/<request id> -> job id (SubmitJob idempotency, scoped by the caller's
//                                      identity: <owner> is Principal::identity with '%', '/',
//                                      spaces and non-ASCII bytes written %XX; "" when the
//                                      coordinator checks no one)
//   history/<job id>/<seq, 12 digits> -> v1::JobHistoryEntry (every transition, gang start
//                                      and abort, epoch commit, in order)
//   worker/<worker id>              -> v1::WorkerRecord (registrations)
//   meta/next_job_seq               -> decimal counter
//   meta/format_version             -> decimal: the layout above is version 2
//
// Compatibility: a binary opens any database of a format version up to its own
// (kStoreFormatVersion; a database from before the key existed is version 1) and refuses a
// newer one with FAILED_PRECONDITION saying what to do, before it changes anything in it.
// An older database is upgraded at Open, in one synced batch with its new version number:
//   1 -> 2  request ids were global (request/<request id> -> job id); each becomes
//           request-by/<the job's submitted_by>/<request id>, so it stays with the identity
//           that submitted the job ("" for jobs submitted while no one was checked). A
//           request id whose job is missing maps to nothing and is dropped (logged).
//
// Every change goes through one WriteBatch written with sync = true, so a change the
// coordinator acted on (or acknowledged to a client) survives kill -9 and power loss.
//
// Disk full (docs/hardening.md): the store keeps a reserve of min_free_bytes on its file
// system, measured through RocksDB's Env. Open refuses to start below it (RocksDB would meet
// the full disk while it recovers its WAL); CheckSpace() lets the coordinator refuse new work
// below it, so the small writes of the work already running land in the reserve.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/status.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// The format version this binary writes and the newest it reads.
constexpr int kStoreFormatVersion = 2;

// A group of changes written atomically by CoordinatorStore::Commit().
class StoreBatch {
 public:
  void PutJob(const v1::JobRecord& record);
  // `owner`'s request id names `job_id` (owner: the submitting Principal::identity).
  void PutRequest(const std::string& owner, const std::string& request_id,
                  const std::string& job_id);
  void AppendHistory(const std::string& job_id, const v1::JobHistoryEntry& entry);
  void PutWorker(const v1::WorkerRecord& record);
  void DeleteWorker(const std::string& worker_id);
  void PutNextJobSeq(int64_t seq);
  bool empty() const { return batch_.Count() == 0; }

 private:
  friend class CoordinatorStore;
  rocksdb::WriteBatch batch_;
};

struct CoordinatorStoreOptions {
  // Directory of the database (created when missing).
  std::string dir;
  // The file layer RocksDB goes through (null = the default). Tests inject one that plays a
  // full disk (tests/testing/full_disk_fs.h).
  std::shared_ptr<rocksdb::Env> env;
  // The space reserve (see above); 0 = none.
  uint64_t min_free_bytes = kCoordinatorMinFreeBytes;
};

class CoordinatorStore {
 public:
  // Opens (creating if needed) the database in options.dir. UNAVAILABLE when another process
  // holds it (RocksDB's LOCK) or its file system has less than min_free_bytes free or no space
  // to recover in (the message names the directory and says to free space), DATA_LOSS when it
  // is corrupt, FAILED_PRECONDITION when a newer binary wrote it (format version above
  // kStoreFormatVersion).
  static StatusOr<std::unique_ptr<CoordinatorStore>> Open(const CoordinatorStoreOptions& options);
  static StatusOr<std::unique_ptr<CoordinatorStore>> Open(const std::string& dir);
  ~CoordinatorStore();

  // Writes the batch durably (WAL fsync) before returning. UNAVAILABLE, saying to free space,
  // when the disk is full: the batch is then not acknowledged (a restart may still find it,
  // when it reached the WAL before the sync failed).
  Status Commit(StoreBatch* batch);
  // OK, or UNAVAILABLE when the file system has less than min_free_bytes free: "<what> refused:
  // only N MiB free in <dir> ...". For requests that start new work (nothing changed yet).
  Status CheckSpace(const std::string& what) const;

  Status LoadJobs(std::vector<v1::JobRecord>* jobs) const;
  Status LoadWorkers(std::vector<v1::WorkerRecord>* workers) const;
  // The job created for `owner`'s `request_id`, or NOT_FOUND (also when another identity
  // used the same request id).
  StatusOr<std::string> FindRequest(const std::string& owner, const std::string& request_id) const;
  // 1 for a fresh database.
  StatusOr<int64_t> NextJobSeq() const;
  // The job's history in order.
  Status ReadHistory(const std::string& job_id, std::vector<v1::JobHistoryEntry>* entries) const;

  const std::string& dir() const { return dir_; }
  int format_version() const { return format_version_; }

  // An online, consistent copy of the database in `out_dir` (which must not exist; same
  // file system: RocksDB hard-links the table files): rocksdb::Checkpoint. The copy opens
  // as a database of its own, e.g. as a restored coordinator's <data-dir>/db.
  Status Checkpoint(const std::string& out_dir) const;

 private:
  CoordinatorStore(const CoordinatorStoreOptions& options, rocksdb::DB* db)
      : dir_(options.dir), env_(options.env), min_free_bytes_(options.min_free_bytes), db_(db) {}
  rocksdb::Env* env() const { return env_ ? env_.get() : rocksdb::Env::Default(); }
  Status ScanPrefix(const std::string& prefix,
                    const std::function<Status(const rocksdb::Slice& key,
                                               const rocksdb::Slice& value)>& fn) const;

  // Reads meta/format_version (a database without it is version 1), checks it, and
  // upgrades an older database to kStoreFormatVersion.
  Status CheckFormatVersion();
  // The 1 -> 2 upgrade (above) into `batch`.
  Status ScopeRequestIds(StoreBatch* batch) const;

  std::string dir_;
  std::shared_ptr<rocksdb::Env> env_;  // outlives db_ (declared before it)
  uint64_t min_free_bytes_;
  std::unique_ptr<rocksdb::DB> db_;
  std::atomic<bool> write_failed_{false};  // a write failed: do not sync or close the WAL
  int format_version_ = kStoreFormatVersion;
};

}  // namespace mlcd::coordinator
