// The coordinator's persistent state: its own RocksDB (ARCHITECTURE.md, "Storage").
//
// Layout (one column family, keys ordered so each kind is one range):
//   job/<job id>                    -> v1::JobRecord (the job, its rounds, its running gang)
//   request/<request id>            -> job id (SubmitJob idempotency)
//   history/<job id>/<seq, 12 digits> -> v1::JobHistoryEntry (every transition, gang start
//                                      and abort, epoch commit, in order)
//   worker/<worker id>              -> v1::WorkerRecord (registrations)
//   meta/next_job_seq               -> decimal counter
//   meta/format_version             -> decimal: the layout above is version 1
//
// Compatibility: a binary opens any database of a format version up to its own
// (kStoreFormatVersion; a database from before the key existed is version 1 and gets the
// key) and refuses a newer one with FAILED_PRECONDITION saying what to do, before it
// changes anything in it.
//
// Every change goes through one WriteBatch written with sync = true, so a change the
// coordinator acted on (or acknowledged to a client) survives kill -9 and power loss.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "mlcd/v1/coordinator.pb.h"

namespace mlcd::coordinator {

// The format version this binary writes and the newest it reads.
constexpr int kStoreFormatVersion = 1;

// A group of changes written atomically by CoordinatorStore::Commit().
class StoreBatch {
 public:
  void PutJob(const v1::JobRecord& record);
  void PutRequest(const std::string& request_id, const std::string& job_id);
  void AppendHistory(const std::string& job_id, const v1::JobHistoryEntry& entry);
  void PutWorker(const v1::WorkerRecord& record);
  void DeleteWorker(const std::string& worker_id);
  void PutNextJobSeq(int64_t seq);
  bool empty() const { return batch_.Count() == 0; }

 private:
  friend class CoordinatorStore;
  rocksdb::WriteBatch batch_;
};

class CoordinatorStore {
 public:
  // Opens (creating if needed) the database in `dir`. UNAVAILABLE when another process
  // holds it (RocksDB's LOCK), DATA_LOSS when it is corrupt, FAILED_PRECONDITION when a
  // newer binary wrote it (format version above kStoreFormatVersion).
  static StatusOr<std::unique_ptr<CoordinatorStore>> Open(const std::string& dir);
  ~CoordinatorStore();

  // Writes the batch durably (WAL fsync) before returning.
  Status Commit(StoreBatch* batch);

  Status LoadJobs(std::vector<v1::JobRecord>* jobs) const;
  Status LoadWorkers(std::vector<v1::WorkerRecord>* workers) const;
  // The job created for `request_id`, or NOT_FOUND.
  StatusOr<std::string> FindRequest(const std::string& request_id) const;
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
  CoordinatorStore(std::string dir, rocksdb::DB* db) : dir_(std::move(dir)), db_(db) {}
  Status ScanPrefix(const std::string& prefix,
                    const std::function<Status(const rocksdb::Slice& key,
                                               const rocksdb::Slice& value)>& fn) const;

  // Reads meta/format_version (writing it to a database that has none) and checks it.
  Status CheckFormatVersion();

  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  int format_version_ = kStoreFormatVersion;
};

}  // namespace mlcd::coordinator
