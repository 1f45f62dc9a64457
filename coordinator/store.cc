#include "coordinator/store.h"

#include <rocksdb/options.h>
#include <rocksdb/utilities/checkpoint.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "common/file_util.h"
#include "common/log.h"

namespace mlcd::coordinator {
namespace {

constexpr const char* kJobPrefix = "job/";
constexpr const char* kRequestPrefix = "request-by/";
// Format version 1: request ids shared by every caller (request/<request id> -> job id).
constexpr const char* kGlobalRequestPrefix = "request/";
constexpr const char* kHistoryPrefix = "history/";
constexpr const char* kWorkerPrefix = "worker/";
constexpr const char* kNextJobSeqKey = "meta/next_job_seq";
constexpr const char* kFormatVersionKey = "meta/format_version";

std::string HistoryKey(const std::string& job_id, int64_t seq) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%012lld", static_cast<long long>(seq));
  return std::string(kHistoryPrefix) + job_id + "/" + buf;
}

// request-by/<owner>/<request id>: the owner with '%', '/', and bytes outside '!'..'~'
// written %XX, so the first '/' after the prefix ends it.
std::string RequestKey(const std::string& owner, const std::string& request_id) {
  std::string key = kRequestPrefix;
  for (unsigned char c : owner) {
    if (c == '%' || c == '/' || c < 0x21 || c > 0x7e) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      key += buf;
    } else {
      key += static_cast<char>(c);
    }
  }
  return key + "/" + request_id;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsCorruption()) return Status::DataLoss(what + ": " + s.ToString());
  if (s.IsNoSpace()) {
    return Status::Unavailable(what + ": " + s.ToString() +
                               " (the disk is full: free space on it)");
  }
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return Status::Unavailable(what + ": " + s.ToString() +
                               " (is another mlcd-coordinator using this --data-dir?)");
  }
  return Status::Internal(what + ": " + s.ToString());
}

std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

void StoreBatch::PutJob(const v1::JobRecord& record) {
  batch_.Put(kJobPrefix + record.job().id(), record.SerializeAsString());
}

void StoreBatch::PutRequest(const std::string& owner, const std::string& request_id,
                            const std::string& job_id) {
  batch_.Put(RequestKey(owner, request_id), job_id);
}

void StoreBatch::AppendHistory(const std::string& job_id, const v1::JobHistoryEntry& entry) {
  batch_.Put(HistoryKey(job_id, entry.seq()), entry.SerializeAsString());
}

void StoreBatch::PutWorker(const v1::WorkerRecord& record) {
  batch_.Put(kWorkerPrefix + record.worker_id(), record.SerializeAsString());
}

void StoreBatch::DeleteWorker(const std::string& worker_id) {
  batch_.Delete(kWorkerPrefix + worker_id);
}

void StoreBatch::PutNextJobSeq(int64_t seq) { batch_.Put(kNextJobSeqKey, std::to_string(seq)); }

StatusOr<std::unique_ptr<CoordinatorStore>> CoordinatorStore::Open(const std::string& dir) {
  CoordinatorStoreOptions options;
  options.dir = dir;
  return Open(options);
}

StatusOr<std::unique_ptr<CoordinatorStore>> CoordinatorStore::Open(
    const CoordinatorStoreOptions& store_options) {
  const std::string& dir = store_options.dir;
  MLCD_RETURN_IF_ERROR(MakeDirs(dir));
  rocksdb::Env* env = store_options.env ? store_options.env.get() : rocksdb::Env::Default();
  // Before RocksDB replays its WAL into new files: on a full disk that fails deep inside it.
  uint64_t free = 0;
  if (store_options.min_free_bytes > 0 && env->GetFreeSpace(dir, &free).ok() &&
      free < store_options.min_free_bytes) {
    return Status::Unavailable(
        "cannot open the coordinator database in " + dir + ": only " + MiB(free) +
        " free on its file system, and the coordinator needs at least " +
        MiB(store_options.min_free_bytes) +
        " (--min-free-mb) to recover its state and run. Free space there (or move --data-dir) "
        "and start it again; nothing was changed");
  }
  rocksdb::Options options;
  options.env = env;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 5;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  MLCD_RETURN_IF_ERROR(FromRocks(s, "opening the coordinator database in " + dir));
  std::unique_ptr<CoordinatorStore> store(new CoordinatorStore(store_options, db));
  MLCD_RETURN_IF_ERROR(store->CheckFormatVersion());
  return store;
}

Status CoordinatorStore::CheckSpace(const std::string& what) const {
  uint64_t free = 0;
  if (min_free_bytes_ == 0 || !env()->GetFreeSpace(dir_, &free).ok() || free >= min_free_bytes_)
    return Status::Ok();
  return Status::Unavailable(what + " refused: only " + MiB(free) + " free in " + dir_ +
                             ", below the coordinator's reserve of " + MiB(min_free_bytes_) +
                             " (kept for the jobs already running). Free space on that file "
                             "system and try again");
}

Status CoordinatorStore::CheckFormatVersion() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kFormatVersionKey, &value);
  // No key: a new database, or one written before the key existed (its layout is version 1).
  int version = 1;
  if (!s.IsNotFound()) {
    MLCD_RETURN_IF_ERROR(FromRocks(s, "reading the format version of " + dir_));
    try {
      size_t used = 0;
      version = std::stoi(value, &used);
      if (used != value.size() || version < 1) throw std::invalid_argument(value);
    } catch (const std::exception&) {
      return Status::DataLoss("coordinator database " + dir_ + ": format version '" + value +
                              "' is not a positive number");
    }
  }
  if (version > kStoreFormatVersion) {
    return Status::FailedPrecondition(
        "the coordinator database in " + dir_ + " has format version " + std::to_string(version) +
        ", written by a newer mlcd-coordinator; this one reads versions up to " +
        std::to_string(kStoreFormatVersion) +
        ". Run the newer mlcd-coordinator, or restore a backup taken with this version "
        "(docs/deploy.md, \"Backups\"); the database was not changed");
  }
  format_version_ = kStoreFormatVersion;
  if (version == kStoreFormatVersion && !s.IsNotFound()) return Status::Ok();
  // Upgrade (or stamp a new database): the changes and the new version in one synced batch.
  StoreBatch batch;
  if (version < 2) MLCD_RETURN_IF_ERROR(ScopeRequestIds(&batch));
  batch.batch_.Put(kFormatVersionKey, std::to_string(kStoreFormatVersion));
  MLCD_RETURN_IF_ERROR(Commit(&batch).WithContext("upgrading the coordinator database in " + dir_ +
                                                  " from format "
                                                  "version " +
                                                  std::to_string(version)));
  if (!s.IsNotFound() || batch.batch_.Count() > 1) {
    MLCD_LOG(INFO) << "coordinator database " << dir_ << " upgraded from format version " << version
                   << " to " << kStoreFormatVersion;
  }
  return Status::Ok();
}

Status CoordinatorStore::ScopeRequestIds(StoreBatch* batch) const {
  int moved = 0;
  MLCD_RETURN_IF_ERROR(
      ScanPrefix(kGlobalRequestPrefix, [&](const rocksdb::Slice& key, const rocksdb::Slice& value) {
        const std::string request_id = key.ToString().substr(std::strlen(kGlobalRequestPrefix));
        const std::string job_id = value.ToString();
        batch->batch_.Delete(key);
        std::string record_bytes;
        rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kJobPrefix + job_id, &record_bytes);
        if (s.IsNotFound()) {
          MLCD_LOG(WARNING) << "request id '" << request_id << "' named job " << job_id
                            << ", which does not exist: dropped";
          return Status::Ok();
        }
        MLCD_RETURN_IF_ERROR(FromRocks(s, "reading coordinator state"));
        v1::JobRecord record;
        if (!record.ParseFromString(record_bytes)) {
          return Status::DataLoss("coordinator database: record " + std::string(kJobPrefix) +
                                  job_id + " does not parse");
        }
        batch->PutRequest(record.job().submitted_by(), request_id, job_id);
        ++moved;
        return Status::Ok();
      }));
  if (moved > 0) {
    MLCD_LOG(INFO) << moved << " request ids scoped to the identity that submitted their job";
  }
  return Status::Ok();
}

Status CoordinatorStore::Checkpoint(const std::string& out_dir) const {
  rocksdb::Checkpoint* raw = nullptr;
  MLCD_RETURN_IF_ERROR(
      FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), "checkpointing " + dir_));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  // log_size_for_flush 0: flush the memtable first, so the copy needs no WAL replay.
  return FromRocks(checkpoint->CreateCheckpoint(out_dir, 0),
                   "checkpointing " + dir_ + " into " + out_dir);
}

CoordinatorStore::~CoordinatorStore() {
  if (db_ && write_failed_) {
    // RocksDB cannot touch a WAL whose write failed (Debian's build asserts in SyncWAL and
    // Close): leave the database to the process exit; every acknowledged write was synced.
    MLCD_LOG(WARNING) << "coordinator database " << dir_
                      << " left unclosed after a failed write (its WAL cannot be synced)";
    (void)db_.release();
    return;
  }
  if (db_) {
    db_->SyncWAL();
    db_->Close();
  }
}

Status CoordinatorStore::Commit(StoreBatch* batch) {
  if (batch->empty()) return Status::Ok();
  rocksdb::WriteOptions options;
  options.sync = true;
  rocksdb::Status s = db_->Write(options, &batch->batch_);
  if (!s.ok()) write_failed_ = true;
  return FromRocks(s, "writing coordinator state in " + dir_);
}

Status CoordinatorStore::ScanPrefix(
    const std::string& prefix,
    const std::function<Status(const rocksdb::Slice& key, const rocksdb::Slice& value)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    MLCD_RETURN_IF_ERROR(fn(it->key(), it->value()));
  }
  return FromRocks(it->status(), "reading coordinator state");
}

Status CoordinatorStore::LoadJobs(std::vector<v1::JobRecord>* jobs) const {
  return ScanPrefix(kJobPrefix, [&](const rocksdb::Slice& key, const rocksdb::Slice& value) {
    v1::JobRecord record;
    if (!record.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return Status::DataLoss("coordinator database: record " + key.ToString() + " does not parse");
    }
    jobs->push_back(std::move(record));
    return Status::Ok();
  });
}

Status CoordinatorStore::LoadWorkers(std::vector<v1::WorkerRecord>* workers) const {
  return ScanPrefix(kWorkerPrefix, [&](const rocksdb::Slice& key, const rocksdb::Slice& value) {
    v1::WorkerRecord record;
    if (!record.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return Status::DataLoss("coordinator database: record " + key.ToString() + " does not parse");
    }
    workers->push_back(std::move(record));
    return Status::Ok();
  });
}

StatusOr<std::string> CoordinatorStore::FindRequest(const std::string& owner,
                                                    const std::string& request_id) const {
  std::string job_id;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), RequestKey(owner, request_id), &job_id);
  if (s.IsNotFound()) return Status::NotFound("no job for request id '" + request_id + "'");
  MLCD_RETURN_IF_ERROR(FromRocks(s, "reading coordinator state"));
  return job_id;
}

StatusOr<int64_t> CoordinatorStore::NextJobSeq() const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kNextJobSeqKey, &value);
  if (s.IsNotFound()) return int64_t{1};
  MLCD_RETURN_IF_ERROR(FromRocks(s, "reading coordinator state"));
  return static_cast<int64_t>(std::stoll(value));
}

Status CoordinatorStore::ReadHistory(const std::string& job_id,
                                     std::vector<v1::JobHistoryEntry>* entries) const {
  return ScanPrefix(std::string(kHistoryPrefix) + job_id + "/", [&](const rocksdb::Slice& key,
                                                                    const rocksdb::Slice& value) {
    v1::JobHistoryEntry entry;
    if (!entry.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return Status::DataLoss("coordinator database: record " + key.ToString() + " does not parse");
    }
    entries->push_back(std::move(entry));
    return Status::Ok();
  });
}

}  // namespace mlcd::coordinator
