#include "labelstore/storage.h"

#include <openssl/rand.h>
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include "common/clock.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "labelstore/block_format.h"
#include "labelstore/block_locks.h"
#include "labelstore/block_write.h"
#include "labelstore/read_batch.h"
#include "labelstore/rocks_status.h"

namespace mlcd::labelstore {
namespace {

constexpr char kSetsFamily[] = "sets";
constexpr char kBlocksFamily[] = "blocks";
constexpr char kNextSetIdKey[] = "next_set_id";
constexpr char kCapabilitySecretKey[] = "write_capability_secret";
constexpr size_t kCapabilitySecretBytes = 32;

static_assert((size_t{1} << kIndexBits) > kMaxIdsPerRead,
              "request index must fit the packed sort key");

}  // namespace

// ---------------------------------------------------------------------------------------

struct LabelStorage::SetState {
  std::string name;
  uint64_t set_id = 0;
  int32_t block_rows = 0;
  int block_shift = 0;
  int32_t num_classes = 0;
  int32_t l = 0;
  bool with_scores = false;
  std::string owner;  // fixed at creation (info.owner())
  BlockLayout layout() const { return BlockLayout{block_rows, l, with_scores}; }

  // Lock order: block_locks' stripes, then write_mu, then info_mu.
  BlockLocks block_locks;  // held by a Write from reading its blocks until after its commit
  Mutex write_mu;          // serialises the commits of Write, and Seal and Delete, of this set
  mutable Mutex info_mu;
  v1::LabelSetInfo info GUARDED_BY(info_mu);  // changed only under write_mu
  std::atomic<bool> sealed{false};
  std::atomic<bool> deleted{false};

  v1::LabelSetInfo Info() const {
    MutexLock lock(&info_mu);
    return info;
  }
};

LabelStorage::LabelStorage(const LabelStorageOptions& options) : options_(options) {}

StatusOr<std::unique_ptr<LabelStorage>> LabelStorage::Open(const LabelStorageOptions& options) {
  if (options.data_dir.empty())
    return Status::InvalidArgument("label store data dir is empty; pass --data-dir DIR");
  std::unique_ptr<LabelStorage> storage(new LabelStorage(options));
  MLCD_RETURN_IF_ERROR(MakeDirs(options.data_dir));
  MLCD_RETURN_IF_ERROR(storage->OpenDb());
  storage->health_ =
      std::make_unique<StorageHealth>(options.env ? options.env.get() : rocksdb::Env::Default(),
                                      options.data_dir, options.min_free_bytes);
  MLCD_RETURN_IF_ERROR(storage->LoadSets());
  MLCD_RETURN_IF_ERROR(storage->LoadCapabilitySecret());
  storage->bg_thread_ = std::thread([s = storage.get()] { s->BackgroundLoop(); });
  return storage;
}

Status LabelStorage::OpenDb() {
  cache_ = rocksdb::NewLRUCache(options_.block_cache_bytes, /*num_shard_bits=*/6);

  rocksdb::DBOptions db_options;
  if (options_.env) db_options.env = options_.env.get();
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 4;
  db_options.max_manifest_file_size = 64 << 20;
  db_options.bytes_per_sync = 1 << 20;

  const auto supported = rocksdb::GetSupportedCompressions();
  const bool have_lz4 =
      std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) != supported.end();

  // Blocks: large values read by point lookups. Bloom filters skip files that lack a block;
  // index and filter blocks live in table-reader memory (never evicted); the hash index inside
  // data blocks shortens the in-block search; LZ4 only on disk (the cache holds blocks
  // uncompressed, so a cached read pays nothing for it).
  rocksdb::BlockBasedTableOptions blocks_table;
  blocks_table.block_cache = cache_;
  blocks_table.block_size = 16 << 10;
  blocks_table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  blocks_table.cache_index_and_filter_blocks = false;
  blocks_table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  blocks_table.format_version = 5;
  rocksdb::ColumnFamilyOptions blocks_options;
  blocks_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(blocks_table));
  blocks_options.write_buffer_size = options_.write_buffer_bytes;
  blocks_options.level_compaction_dynamic_level_bytes = true;
  // Reads almost always hit (ids of a set are dense): no filters in the bottom level, where
  // sealed sets end up after their compaction.
  blocks_options.optimize_filters_for_hits = true;
  blocks_options.compression = have_lz4 ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;

  rocksdb::BlockBasedTableOptions small_table;
  small_table.block_cache = cache_;
  rocksdb::ColumnFamilyOptions small_options;
  small_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(small_table));
  small_options.write_buffer_size = 4 << 20;

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, small_options},
      {kSetsFamily, small_options},
      {kBlocksFamily, blocks_options},
  };
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options_.data_dir, families, &handles, &db_);
  if (!s.ok()) return FromRocks(s, "cannot open the label store database in " + options_.data_dir);
  default_cf_ = handles[0];
  sets_cf_ = handles[1];
  blocks_cf_ = handles[2];
  return Status::Ok();
}

Status LabelStorage::LoadSets() {
  // Open runs this before any other thread sees the storage; the lock states the rule.
  WriterMutexLock lock(&sets_mu_);
  std::string counter;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), default_cf_, kNextSetIdKey, &counter);
  if (s.ok() && counter.size() == 8) {
    next_set_id_ = GetBigEndian64(counter.data());
  } else if (!s.IsNotFound()) {
    return s.ok() ? Status::DataLoss("label store counter 'next_set_id' is malformed in " +
                                     options_.data_dir)
                  : FromRocks(s, "reading the set counter");
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), sets_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice value = it->value();
    auto set = std::make_shared<SetState>();
    set->name = it->key().ToString();
    SetRecord record;
    if (!DecodeSetRecord(value.data(), value.size(), &record)) {
      return Status::DataLoss("label set record '" + set->name + "' in " + options_.data_dir +
                              " is corrupt");
    }
    set->set_id = record.set_id;
    set->block_rows = record.block_rows;
    if (!ValidBlockRows(set->block_rows)) {
      return Status::DataLoss("label set record '" + set->name + "' has block size " +
                              std::to_string(set->block_rows));
    }
    set->block_shift = __builtin_ctz(static_cast<unsigned>(set->block_rows));
    set->num_classes = record.info.num_classes();
    set->l = record.info.labels_per_sample();
    set->with_scores = record.info.with_scores();
    set->owner = record.info.owner();
    set->sealed = record.info.state() == v1::LABEL_SET_STATE_SEALED;
    {
      MutexLock lock(&set->info_mu);
      set->info = std::move(record.info);
    }
    next_set_id_ = std::max(next_set_id_, set->set_id + 1);
    sets_.emplace(set->name, std::move(set));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "reading label set records");
  MLCD_LOG(INFO) << "label store opened in " << options_.data_dir << " with " << sets_.size()
                 << " label sets";
  return Status::Ok();
}

Status LabelStorage::LoadCapabilitySecret() {
  std::string secret;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), default_cf_, kCapabilitySecretKey, &secret);
  if (s.ok()) {
    if (secret.size() != kCapabilitySecretBytes)
      return Status::DataLoss("the write-capability secret in " + options_.data_dir +
                              " is malformed");
    capability_secret_ = std::move(secret);
    return Status::Ok();
  }
  if (!s.IsNotFound()) return FromRocks(s, "reading the write-capability secret");
  secret.resize(kCapabilitySecretBytes);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()),
                 static_cast<int>(secret.size())) != 1)
    return Status::Internal("RAND_bytes failed making the write-capability secret");
  rocksdb::WriteOptions sync;
  sync.sync = true;
  MLCD_RETURN_IF_ERROR(Checked(FromRocks(db_->Put(sync, default_cf_, kCapabilitySecretKey, secret),
                                         "storing the write-capability secret")));
  capability_secret_ = std::move(secret);
  return Status::Ok();
}

LabelStorage::~LabelStorage() {
  {
    MutexLock lock(&bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (db_) db_->DisableManualCompaction();  // aborts a running CompactRange
  if (bg_thread_.joinable()) bg_thread_.join();
  if (db_ && health_ && health_->write_failed()) {
    // RocksDB cannot touch a WAL whose write failed (its debug build asserts): leave the
    // database to the process exit; every acknowledged write was synced before.
    MLCD_LOG(WARNING) << "label store closed after a failed write: not syncing its WAL";
    return;
  }
  if (db_) {
    db_->SyncWAL();
    for (auto* handle : {default_cf_, sets_cf_, blocks_cf_}) {
      if (handle) db_->DestroyColumnFamilyHandle(handle);
    }
    db_->Close();
    delete db_;
  }
}

std::shared_ptr<LabelStorage::SetState> LabelStorage::Find(const std::string& name) const {
  ReaderMutexLock lock(&sets_mu_);
  auto it = sets_.find(name);
  return it == sets_.end() ? nullptr : it->second;
}

Status LabelStorage::NotFound(const std::string& name) const {
  // Only a miss pays for the name check, so a malformed name gets the more useful answer.
  MLCD_RETURN_IF_ERROR(ValidateLabelSetName(name));
  return Status::NotFound("label set '" + name + "' does not exist (see `mlcdctl labels list`)");
}

Status LabelStorage::StaleStream(const std::string& name, bool recreated) {
  return Status::Aborted("label set '" + name + "' was deleted" +
                         (recreated ? " and created again" : "") +
                         " while this WriteLabels stream was open; nothing of this message was "
                         "written. Restart the write from the beginning (into the set as it is "
                         "now, if that is what you meant)");
}

std::string LabelStorage::EncodeRecord(const SetState& set, const v1::LabelSetInfo& info) const {
  return EncodeSetRecord(set.set_id, set.block_rows, info);
}

v1::LabelSetInfo LabelStorage::InfoWithSize(const SetState& set) const {
  v1::LabelSetInfo info = set.Info();
  auto [begin, end] = SetKeyRange(set.set_id);
  rocksdb::Range range(begin, end);
  rocksdb::SizeApproximationOptions size_options;
  size_options.include_memtables = true;
  size_options.include_files = true;
  uint64_t bytes = 0;
  if (db_->GetApproximateSizes(size_options, blocks_cf_, &range, 1, &bytes).ok())
    info.set_size_bytes(bytes);
  return info;
}

StatusOr<v1::LabelSetInfo> LabelStorage::Create(const v1::CreateLabelSetRequest& request,
                                                const std::string& owner) {
  MLCD_RETURN_IF_ERROR(ValidateCreateRequest(request));
  MLCD_RETURN_IF_ERROR(health_->CheckSpace());
  MutexLock create_lock(&create_mu_);
  if (Find(request.name())) {
    return Status::AlreadyExists("label set '" + request.name() +
                                 "' already exists; pick another name or delete it first");
  }
  auto set = std::make_shared<SetState>();
  set->name = request.name();
  set->num_classes = request.num_classes();
  set->l = request.labels_per_sample();
  set->with_scores = request.with_scores();
  set->owner = owner;
  set->block_rows = ChooseBlockRows(options_.target_block_bytes, set->l, set->with_scores);
  set->block_shift = __builtin_ctz(static_cast<unsigned>(set->block_rows));
  uint64_t set_id;
  {
    ReaderMutexLock lock(&sets_mu_);
    set_id = next_set_id_;
  }
  set->set_id = set_id;
  v1::LabelSetInfo info;
  info.set_name(request.name());
  info.set_num_classes(request.num_classes());
  info.set_labels_per_sample(request.labels_per_sample());
  info.set_with_scores(request.with_scores());
  *info.mutable_metadata() = request.metadata();
  info.set_state(v1::LABEL_SET_STATE_OPEN);
  info.set_created_unix_ms(NowUnixMs());
  info.set_owner(owner);
  {
    MutexLock lock(&set->info_mu);
    set->info = info;
  }

  rocksdb::WriteBatch batch;
  char counter[8];
  PutBigEndian64(counter, set_id + 1);
  batch.Put(default_cf_, kNextSetIdKey, rocksdb::Slice(counter, 8));
  batch.Put(sets_cf_, set->name, EncodeRecord(*set, info));
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  MLCD_RETURN_IF_ERROR(Checked(
      FromRocks(db_->Write(write_options, &batch), "creating label set '" + set->name + "'")));
  {
    WriterMutexLock lock(&sets_mu_);
    next_set_id_ = set_id + 1;
    sets_.emplace(set->name, set);
  }
  MLCD_LOG(INFO) << "created label set '" << set->name << "' (k=" << set->num_classes
                 << ", l=" << set->l << (set->with_scores ? ", with scores" : "") << ", "
                 << set->block_rows << " rows per block)";
  return InfoWithSize(*set);
}

Status LabelStorage::CheckWritable(const SetState& set, uint64_t set_id,
                                   const ChangeCheck& may_change) const {
  if (set.deleted) return set_id != 0 ? StaleStream(set.name, false) : NotFound(set.name);
  if (may_change) MLCD_RETURN_IF_ERROR(may_change(set.owner, set.set_id));
  if (set.sealed) {
    return Status::FailedPrecondition("label set '" + set.name +
                                      "' is sealed and immutable; write to a new set instead");
  }
  return Status::Ok();
}

StatusOr<WriteResult> LabelStorage::Write(const std::string& name,
                                          const v1::WriteLabelsRequest& message, uint64_t set_id,
                                          const ChangeCheck& may_change) {
  auto set = Find(name);
  if (set_id != 0 && (!set || set->set_id != set_id)) return StaleStream(name, set != nullptr);
  if (!set) return NotFound(name);
  MLCD_RETURN_IF_ERROR(health_->CheckSpace());
  {
    MutexLock write_lock(&set->write_mu);
    MLCD_RETURN_IF_ERROR(CheckWritable(*set, set_id, may_change));
  }
  std::vector<uint64_t> sorted_ids;
  MLCD_RETURN_IF_ERROR(ValidateWriteMessage(
      message, LabelSetShape{set->num_classes, set->l, set->with_scores}, &sorted_ids));

  // The message's blocks are read, changed and committed while their locks are held; other
  // writers of this set work on other blocks meanwhile (labelstore/block_locks.h).
  const BlockWritePlan plan = PlanBlockWrite(message, set->block_shift);
  BlockLocks::Held held = set->block_locks.Lock(plan.blocks);
  rocksdb::WriteBatch batch;
  const BlockTarget target{db_, blocks_cf_, set->set_id, name, set->layout()};
  MLCD_ASSIGN_OR_RETURN(const uint64_t new_samples, UpdateBlocks(target, message, plan, &batch));

  // Commit: the set's counters and the blocks in one atomic batch, under the set's write lock
  // (so the counters of concurrent commits add up, and Seal and Delete see whole messages).
  MutexLock write_lock(&set->write_mu);
  MLCD_RETURN_IF_ERROR(CheckWritable(*set, set_id, nullptr));
  v1::LabelSetInfo info = set->Info();
  info.set_num_samples(info.num_samples() + new_samples);
  const uint64_t max_id = plan.order.back().first;
  if (max_id != std::numeric_limits<uint64_t>::max()) {
    info.set_sample_id_end(std::max<uint64_t>(info.sample_id_end(), max_id + 1));
  } else {
    info.set_sample_id_end(max_id);
  }
  batch.Put(sets_cf_, name, EncodeRecord(*set, info));
  MLCD_RETURN_IF_ERROR(Checked(FromRocks(db_->Write(rocksdb::WriteOptions(), &batch),
                                         "writing rows of label set '" + name + "'")));
  {
    MutexLock lock(&set->info_mu);
    set->info = info;
  }
  return WriteResult{set->set_id, plan.order.size(), new_samples, info.num_samples()};
}

Status LabelStorage::SyncWal() {
  return Checked(FromRocks(db_->SyncWAL(), "syncing the label store WAL"));
}

Status LabelStorage::Checked(Status status) { return health_->Checked(std::move(status)); }

Status LabelStorage::Health() const { return health_->Get(); }

bool LabelStorage::TryResume() {
  if (!db_->Resume().ok()) return false;
  // A write that failed in the WAL may have left no background error: prove writes work.
  rocksdb::WriteOptions sync;
  sync.sync = true;
  return db_->Put(sync, default_cf_, "health_probe", "1").ok();
}

StatusOr<v1::LabelSetInfo> LabelStorage::Seal(const std::string& name, bool require_open,
                                              const ChangeCheck& may_change) {
  auto set = Find(name);
  if (!set) return NotFound(name);
  MutexLock write_lock(&set->write_mu);
  if (set->deleted) return NotFound(name);
  if (may_change) MLCD_RETURN_IF_ERROR(may_change(set->owner, set->set_id));
  if (set->sealed) {
    if (require_open) {
      return Status::FailedPrecondition("label set '" + name + "' is already sealed");
    }
    return InfoWithSize(*set);
  }
  v1::LabelSetInfo info = set->Info();
  info.set_state(v1::LABEL_SET_STATE_SEALED);
  info.set_sealed_unix_ms(NowUnixMs());
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  MLCD_RETURN_IF_ERROR(
      Checked(FromRocks(db_->Put(write_options, sets_cf_, name, EncodeRecord(*set, info)),
                        "sealing label set '" + name + "'")));
  {
    MutexLock lock(&set->info_mu);
    set->info = info;
  }
  set->sealed = true;
  MLCD_LOG(INFO) << "sealed label set '" << name << "' with " << info.num_samples() << " samples";
  if (options_.compact_on_seal) ScheduleCompaction(set->set_id);
  return InfoWithSize(*set);
}

StatusOr<v1::LabelSetInfo> LabelStorage::Describe(const std::string& name) const {
  auto set = Find(name);
  if (!set) return NotFound(name);
  return InfoWithSize(*set);
}

StatusOr<uint64_t> LabelStorage::OpenIncarnation(const std::string& name,
                                                 const ChangeCheck& may_change) const {
  auto set = Find(name);
  if (!set) return NotFound(name);
  MutexLock write_lock(&set->write_mu);
  MLCD_RETURN_IF_ERROR(CheckWritable(*set, 0, may_change));
  return set->set_id;
}

StatusOr<v1::ListLabelSetsResponse> LabelStorage::List(
    const v1::ListLabelSetsRequest& request) const {
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return Status::InvalidArgument("page_size " + std::to_string(request.page_size()) +
                                   " is outside [0, 1000] (0 = the default of 100)");
  }
  const size_t page_size =
      request.page_size() == 0 ? 100 : static_cast<size_t>(request.page_size());
  const std::string& prefix = request.name_prefix();
  std::vector<std::shared_ptr<SetState>> page;
  bool more = false;
  {
    ReaderMutexLock lock(&sets_mu_);
    auto it = request.page_token().empty() ? sets_.lower_bound(prefix)
                                           : sets_.upper_bound(request.page_token());
    if (!request.page_token().empty() && request.page_token() < prefix)
      it = sets_.lower_bound(prefix);
    for (; it != sets_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (page.size() == page_size) {
        more = true;
        break;
      }
      page.push_back(it->second);
    }
  }
  v1::ListLabelSetsResponse response;
  for (const auto& set : page) *response.add_label_sets() = InfoWithSize(*set);
  if (more) response.set_next_page_token(page.back()->name);
  return response;
}

StatusOr<v1::DeleteLabelSetResponse> LabelStorage::Delete(const std::string& name,
                                                          bool allow_missing,
                                                          const ChangeCheck& may_change) {
  v1::DeleteLabelSetResponse response;
  auto set = Find(name);
  if (!set) {
    if (allow_missing) {
      MLCD_RETURN_IF_ERROR(ValidateLabelSetName(name));
      return response;
    }
    return NotFound(name);
  }
  {
    MutexLock write_lock(&set->write_mu);
    if (set->deleted) {
      if (allow_missing) return response;
      return NotFound(name);
    }
    if (may_change) MLCD_RETURN_IF_ERROR(may_change(set->owner, set->set_id));
    auto [begin, end] = SetKeyRange(set->set_id);
    rocksdb::WriteBatch batch;
    batch.DeleteRange(blocks_cf_, begin, end);
    batch.Delete(sets_cf_, name);
    rocksdb::WriteOptions write_options;
    write_options.sync = true;
    MLCD_RETURN_IF_ERROR(
        Checked(FromRocks(db_->Write(write_options, &batch), "deleting label set '" + name + "'")));
    set->deleted = true;
    response.set_deleted(true);
    response.set_rows_deleted(set->Info().num_samples());
  }
  {
    WriterMutexLock lock(&sets_mu_);
    auto it = sets_.find(name);
    if (it != sets_.end() && it->second == set) sets_.erase(it);
  }
  MLCD_LOG(INFO) << "deleted label set '" << name << "' (" << response.rows_deleted() << " rows)";
  if (options_.compact_on_seal) ScheduleCompaction(set->set_id);
  return response;
}

Status LabelStorage::GetLabels(const std::string& name, const uint64_t* ids, size_t n,
                               bool with_scores, v1::GetLabelsResponse* response) const {
  auto set = Find(name);
  if (!set) return NotFound(name);
  MLCD_RETURN_IF_ERROR(ValidateReadSize(n, set->l));
  if (with_scores && !set->with_scores) {
    return Status::FailedPrecondition("label set '" + name +
                                      "' stores no scores; read it without with_scores (--scores)");
  }
  const size_t l = static_cast<size_t>(set->l);
  const BlockLayout layout = set->layout();
  const int shift = set->block_shift;
  const uint64_t offset_mask = static_cast<uint64_t>(set->block_rows - 1);

  response->Clear();
  response->set_labels_per_sample(set->l);
  response->mutable_labels()->Resize(static_cast<int>(n * l), -1);
  int32_t* out_labels = response->mutable_labels()->mutable_data();
  float* out_scores = nullptr;
  if (with_scores) {
    response->mutable_scores()->Resize(static_cast<int>(n * l),
                                       std::numeric_limits<float>::quiet_NaN());
    out_scores = response->mutable_scores()->mutable_data();
  }

  thread_local ReadScratch s;
  GroupByBlock(ids, n, shift, &s);
  const size_t num_blocks = s.blocks.size();

  s.key_bytes.resize(num_blocks * kBlockKeyBytes);
  s.keys.resize(num_blocks);
  if (s.values.size() < num_blocks) s.values.resize(num_blocks);
  s.statuses.resize(num_blocks);
  for (size_t b = 0; b < num_blocks; ++b) {
    char* key = s.key_bytes.data() + b * kBlockKeyBytes;
    EncodeBlockKey(key, set->set_id, s.blocks[b]);
    s.keys[b] = rocksdb::Slice(key, kBlockKeyBytes);
  }
  static const rocksdb::ReadOptions kReadOptions;
  db_->MultiGet(kReadOptions, blocks_cf_, num_blocks, s.keys.data(), s.values.data(),
                s.statuses.data(),
                /*sorted_input=*/true);

  s.missing.clear();
  Status status;
  const size_t row_bytes = l * 4;
  for (size_t b = 0; b < num_blocks && status.ok(); ++b) {
    const uint32_t begin = s.group_begin[b], end = s.group_begin[b + 1];
    auto position = [&](uint32_t i) -> uint32_t { return s.order[i]; };
    if (s.statuses[b].IsNotFound()) {
      for (uint32_t i = begin; i < end; ++i) s.missing.push_back(position(i));
      continue;
    }
    if (!s.statuses[b].ok()) {
      status = FromRocks(s.statuses[b], "reading label set '" + name + "'");
      break;
    }
    BlockView view;
    if (!ParseBlock(s.values[b].data(), s.values[b].size(), layout, &view)) {
      status = Status::DataLoss("block " + std::to_string(s.blocks[b]) + " of label set '" + name +
                                "' is corrupt");
      break;
    }
    // First locate every row and prefetch it (random rows of a large set miss the CPU caches;
    // issuing all the loads before copying overlaps those misses), then copy.
    for (uint32_t i = begin; i < end; ++i) {
      const uint32_t pos = position(i);
      const int64_t rank = FindRow(view, static_cast<uint32_t>(ids[pos] & offset_mask));
      if (rank < 0) {
        s.missing.push_back(pos);
        continue;
      }
      const char* labels = view.labels + rank * row_bytes;
      const char* scores = out_scores ? view.scores + rank * row_bytes : nullptr;
      Prefetch(labels, row_bytes);
      if (scores) Prefetch(scores, row_bytes);
      s.copies.emplace_back(pos, labels, scores);
    }
  }
  if (status.ok()) {
    for (const RowCopy& c : s.copies) {
      CopyRow(out_labels + c.pos * l, c.labels, row_bytes);
      if (c.scores) CopyRow(out_scores + c.pos * l, c.scores, row_bytes);
    }
  }
  s.copies.clear();
  for (size_t b = 0; b < num_blocks; ++b) s.values[b].Reset();
  if (!status.ok()) {
    response->Clear();
    return status;
  }
  if (!s.missing.empty()) {
    std::sort(s.missing.begin(), s.missing.end());
    response->mutable_missing_indices()->Reserve(static_cast<int>(s.missing.size()));
    response->mutable_missing_ids()->Reserve(static_cast<int>(s.missing.size()));
    for (uint32_t pos : s.missing) {
      response->add_missing_indices(pos);
      response->add_missing_ids(ids[pos]);
    }
  }
  return Status::Ok();
}

void LabelStorage::ScheduleCompaction(uint64_t set_id) {
  {
    MutexLock lock(&bg_mu_);
    bg_queue_.push_back(set_id);
  }
  bg_cv_.notify_all();
}

void LabelStorage::BackgroundLoop() {
  MutexLock lock(&bg_mu_);
  while (true) {
    bg_cv_.wait_for(lock.native(), options_.recovery_interval, [this] {
      bg_mu_.AssertHeld();
      return bg_stop_ || !bg_queue_.empty();
    });
    if (bg_stop_) return;
    if (bg_queue_.empty()) {
      lock.Unlock();
      health_->Poll([this] { return TryResume(); });
      lock.Lock();
      continue;
    }
    const uint64_t set_id = bg_queue_.front();
    bg_queue_.pop_front();
    bg_busy_ = true;
    lock.Unlock();
    auto [begin, end] = SetKeyRange(set_id);
    rocksdb::Slice begin_slice(begin), end_slice(end);
    rocksdb::CompactRangeOptions compact_options;
    compact_options.exclusive_manual_compaction = false;
    compact_options.bottommost_level_compaction =
        rocksdb::BottommostLevelCompaction::kForceOptimized;
    rocksdb::Status s = db_->CompactRange(compact_options, blocks_cf_, &begin_slice, &end_slice);
    if (!s.ok() && !s.IsIncomplete()) {
      MLCD_LOG(WARNING) << "background compaction of set id " << set_id
                        << " failed: " << s.ToString();
    }
    lock.Lock();
    bg_busy_ = false;
    bg_cv_.notify_all();
  }
}

void LabelStorage::WaitForBackgroundWork() {
  MutexLock lock(&bg_mu_);
  bg_cv_.wait(lock.native(), [this] {
    bg_mu_.AssertHeld();
    return bg_stop_ || (bg_queue_.empty() && !bg_busy_);
  });
}

Status LabelStorage::CompactAll() {
  MLCD_RETURN_IF_ERROR(
      FromRocks(db_->Flush(rocksdb::FlushOptions(), blocks_cf_), "flushing the label store"));
  rocksdb::CompactRangeOptions compact_options;
  compact_options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  return FromRocks(db_->CompactRange(compact_options, blocks_cf_, nullptr, nullptr),
                   "compacting the label store");
}

StatusOr<int32_t> LabelStorage::BlockRows(const std::string& name) const {
  auto set = Find(name);
  if (!set) return NotFound(name);
  return set->block_rows;
}

size_t LabelStorage::num_sets() const {
  ReaderMutexLock lock(&sets_mu_);
  return sets_.size();
}

}  // namespace mlcd::labelstore
