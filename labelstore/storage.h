// The label store's storage layer: label sets in one embedded RocksDB.
//
// Layout (docs/labelstore.md explains the choices; labelstore/block_format.h has the bytes):
//   column family "sets":    name -> set record (set id, block size, v1::LabelSetInfo)
//   column family "blocks":  be64(set id) + be64(block number) -> one block, holding the rows
//                            of B consecutive sample ids [b*B, (b+1)*B): a presence bitmap,
//                            per-word rank counts, then the present rows packed (l int32
//                            labels each, then l float scores each when the set has scores)
//   column family "default": "next_set_id" -> be64 counter (set ids are never reused),
//                            "health_probe" (written when writes are resumed after a failure)
//                            and "write_capability_secret" (32 random bytes made at the first
//                            open: the key write capabilities derive from, labelstore/
//                            write_grants.h)
// B is a power of two fixed per set at creation (about 128 KiB of row data per block).
//
// Reads look up the unique blocks of a batch with one RocksDB MultiGet (values pinned in the
// block cache, never copied) and decode the rows straight into the caller's packed output.
// Writes validate a whole message first, then read-modify-write its blocks under their block
// locks and commit blocks + the set's counters in one atomic WriteBatch; the WAL is
// synced before a write is acknowledged (SyncWal), so an acknowledged row survives kill -9
// and power loss.
//
// Thread-safe: reads run concurrently with each other and with writes. Writes to one set run
// concurrently too (the gang's ranks each write their own ids into one set): a write holds
// the locks of its blocks (labelstore/block_locks.h) while it reads, changes and commits them,
// and only its commit is serialised with the set's other commits, Seal and Delete.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "clients/labelstore_limits.h"
#include "common/limits.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "labelstore/storage_health.h"
#include "mlcd/v1/labelstore.pb.h"

namespace rocksdb {
class DB;
class Env;
class ColumnFamilyHandle;
class Cache;
}  // namespace rocksdb

namespace mlcd::labelstore {

struct LabelStorageOptions {
  // Directory of the RocksDB database (created when missing).
  std::string data_dir;
  // Block cache shared by all sets. Sized to hold the sets being trained on: a sealed set of
  // n samples x l labels takes about 4*n*l bytes (8*n*l with scores).
  size_t block_cache_bytes = size_t{512} << 20;
  // Bytes of row data per block; B = the largest power of two with B * row bytes <= this,
  // clamped to [64, 16384] rows (4096 for l = 8). Only affects sets created afterwards.
  size_t target_block_bytes = size_t{128} << 10;
  // Compact a set's key range in the background after Seal (and after Delete, to reclaim
  // space), so a sealed set is read from a few bottom-level files.
  bool compact_on_seal = true;
  // Memtable size of the blocks column family.
  size_t write_buffer_bytes = size_t{64} << 20;
  // The file layer RocksDB writes through (null = the default). Tests inject one that fails
  // writes on demand, as a full disk does.
  std::shared_ptr<rocksdb::Env> env;
  // After a failed write (disk full, I/O error) the database refuses writes; it is resumed
  // (rocksdb::DB::Resume) this often until that works again.
  std::chrono::milliseconds recovery_interval{1000};
  // Writes are refused (UNAVAILABLE, health NOT_SERVING) while the file system of data_dir
  // has less free space than this (labelstore/storage_health.h; --min-free-mb); 0 = never.
  uint64_t min_free_bytes = kLabelStoreMinFreeBytes;
};

// What one WriteLabels message did.
struct WriteResult {
  uint64_t set_id = 0;  // the incarnation written (pass it to the stream's next Write)
  uint64_t rows_written = 0;
  uint64_t new_samples = 0;  // ids that had no row before
  uint64_t num_samples = 0;  // distinct ids in the set afterwards
};

class LabelStorage {
 public:
  // Opens (or creates) the database in options.data_dir. UNAVAILABLE when another process
  // holds it, DATA_LOSS when it is corrupt.
  static StatusOr<std::unique_ptr<LabelStorage>> Open(const LabelStorageOptions& options);
  ~LabelStorage();
  LabelStorage(const LabelStorage&) = delete;
  LabelStorage& operator=(const LabelStorage&) = delete;

  // Called with a set's owner (LabelSetInfo.owner) and incarnation (its set id: never reused,
  // so a set deleted and made again under the same name is another incarnation) under the
  // set's write lock before a change; its error is returned unchanged and nothing is changed
  // (labelstore/ownership.h, labelstore/write_grants.h). Null = no check (in-process
  // callers, tests).
  using ChangeCheck = std::function<Status(const std::string& owner, uint64_t incarnation)>;

  // ALREADY_EXISTS for a name in use; INVALID_ARGUMENT for a bad name or shape. `owner` is
  // recorded with the set (LabelSetInfo.owner).
  StatusOr<v1::LabelSetInfo> Create(const v1::CreateLabelSetRequest& request,
                                    const std::string& owner = "");

  // Validates one message (ValidateWriteMessage) against set `name` and commits all its rows
  // atomically, or nothing. NOT_FOUND / FAILED_PRECONDITION (sealed) / INVALID_ARGUMENT.
  // The commit is in the WAL but not yet synced: call SyncWal() before acknowledging.
  //
  // `set_id` binds a stream to one incarnation of the set: 0 for a stream's first message
  // (any set of that name), then the WriteResult::set_id of its earlier messages. Set ids are
  // never reused, so when the set was deleted (and perhaps created again under the same name)
  // since, the write is ABORTED and nothing is written: the check is made under the set's
  // write lock, which Delete holds while it removes the set.
  // `may_change` is asked on a stream's first message (set_id 0); later ones are bound to the
  // incarnation it allowed.
  StatusOr<WriteResult> Write(const std::string& name, const v1::WriteLabelsRequest& message,
                              uint64_t set_id = 0, const ChangeCheck& may_change = nullptr);
  // Makes every commit so far durable (fsync of the WAL).
  Status SyncWal();

  StatusOr<v1::LabelSetInfo> Seal(const std::string& name, bool require_open,
                                  const ChangeCheck& may_change = nullptr);
  StatusOr<v1::LabelSetInfo> Describe(const std::string& name) const;
  // The incarnation of the OPEN set `name`, once `may_change` allows a write to it.
  // NOT_FOUND / `may_change`'s error / FAILED_PRECONDITION (sealed).
  StatusOr<uint64_t> OpenIncarnation(const std::string& name, const ChangeCheck& may_change) const;
  // The database's secret for write capabilities (made at its first open, never changed).
  const std::string& capability_secret() const { return capability_secret_; }
  // INVALID_ARGUMENT for page_size outside [0, 1000] (0 = 100).
  StatusOr<v1::ListLabelSetsResponse> List(const v1::ListLabelSetsRequest& request) const;
  StatusOr<v1::DeleteLabelSetResponse> Delete(const std::string& name, bool allow_missing,
                                              const ChangeCheck& may_change = nullptr);

  // The hot path. Fills response->labels (n*l, request order, -1 rows for missing ids),
  // scores when with_scores (NaN rows for missing), missing_indices/missing_ids, and
  // labels_per_sample. Existing contents of `response` are replaced; its capacity is reused.
  Status GetLabels(const std::string& name, const uint64_t* ids, size_t n, bool with_scores,
                   v1::GetLabelsResponse* response) const;

  // OK while writes work; UNAVAILABLE naming the failure while the disk is (nearly) full or
  // after a write failed, until the background thread finds it cleared (every
  // recovery_interval; labelstore/storage_health.h). Health checks report NOT_SERVING then.
  Status Health() const;

  // Waits until background compactions queued so far are done (tests, benchmarks).
  void WaitForBackgroundWork();
  // Flushes memtables and compacts every set's range now (benchmarks; not needed for use).
  Status CompactAll();

  // Rows per block of a set (for tests and docs).
  StatusOr<int32_t> BlockRows(const std::string& name) const;
  size_t num_sets() const;

 private:
  struct SetState;
  explicit LabelStorage(const LabelStorageOptions& options);
  Status OpenDb();
  Status LoadSets();
  // Reads the capability secret, or makes and stores it when the database has none.
  Status LoadCapabilitySecret();
  std::shared_ptr<SetState> Find(const std::string& name) const;
  Status NotFound(const std::string& name) const;
  // A stream's set was deleted (and `recreated` under its name) since its first message.
  static Status StaleStream(const std::string& name, bool recreated);
  std::string EncodeRecord(const SetState& set, const v1::LabelSetInfo& info) const;
  // Write's checks, under the set's write lock: NOT_FOUND / ABORTED (deleted, see Write),
  // `may_change`'s error, FAILED_PRECONDITION (sealed).
  Status CheckWritable(const SetState& set, uint64_t set_id, const ChangeCheck& may_change) const;
  v1::LabelSetInfo InfoWithSize(const SetState& set) const;
  void ScheduleCompaction(uint64_t set_id);
  // A write's status: an I/O or space error marks the storage failed (Health()).
  Status Checked(Status status);
  // rocksdb::DB::Resume and a synced probe write; true when writes work again.
  bool TryResume();
  void BackgroundLoop();

  LabelStorageOptions options_;
  std::shared_ptr<rocksdb::Cache> cache_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* sets_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* blocks_cf_ = nullptr;

  Mutex create_mu_;              // serialises Create
  mutable SharedMutex sets_mu_;  // guards sets_ and next_set_id_
  std::map<std::string, std::shared_ptr<SetState>> sets_ GUARDED_BY(sets_mu_);
  uint64_t next_set_id_ GUARDED_BY(sets_mu_) = 1;

  std::unique_ptr<StorageHealth> health_;  // set once the database is open
  std::string capability_secret_;          // set once the database is open

  Mutex bg_mu_;
  std::condition_variable bg_cv_;
  std::deque<uint64_t> bg_queue_ GUARDED_BY(bg_mu_);  // set ids whose range to compact
  bool bg_busy_ GUARDED_BY(bg_mu_) = false;
  bool bg_stop_ GUARDED_BY(bg_mu_) = false;
  std::thread bg_thread_;
};

}  // namespace mlcd::labelstore
