#include "labelstore/storage.h"

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/file_util.h"
#include "common/log.h"

namespace mlcd::labelstore {
namespace {

constexpr char kSetsFamily[] = "sets";
constexpr char kBlocksFamily[] = "blocks";
constexpr char kNextSetIdKey[] = "next_set_id";
constexpr char kRecordMagic[4] = {'L', 'S', 'R', '1'};
constexpr int32_t kMinBlockRows = 64;
constexpr int32_t kMaxBlockRows = 16384;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline void PutBigEndian64(char* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}
inline uint64_t GetBigEndian64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}
inline uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Keys of the blocks column family: be64(set id) + be64(block number). Big-endian so a set is
// one contiguous range and its blocks are in sample-id order.
constexpr size_t kBlockKeyBytes = 16;
inline void EncodeBlockKey(char* out, uint64_t set_id, uint64_t block) {
  PutBigEndian64(out, set_id);
  PutBigEndian64(out + 8, block);
}
// [begin, end) covering every block of a set.
std::pair<std::string, std::string> SetRange(uint64_t set_id) {
  std::string begin(8, '\0'), end(8, '\0');
  PutBigEndian64(begin.data(), set_id);
  PutBigEndian64(end.data(), set_id + 1);
  return {begin, end};
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsNotFound()) return Status::NotFound(what + ": " + s.ToString());
  if (s.IsCorruption()) return Status::DataLoss(what + ": " + s.ToString());
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return Status::Unavailable(
        what + ": " + s.ToString() +
        " (another mlcd-labelstore is using this --data-dir; stop it or pick another dir)");
  }
  if (s.IsIOError() || s.IsNoSpace()) return Status::Unavailable(what + ": " + s.ToString());
  return Status::Internal(what + ": " + s.ToString());
}

// ---------------------------------------------------------------------------------------
// Block encoding.
//
//   u32 present | u32 reserved (0)
//   u64 bitmap[W]           bit j of word w: sample id b*B + 64*w + j has a row (W = B/64)
//   u32 rank[W]             set bits in words [0, w)
//   i32 labels[present][l]  rows of the present ids, ascending
//   f32 scores[present][l]  only for sets with scores
// A block's size is fully determined by (B, l, scores, present), which decoding checks.

struct BlockLayout {
  int32_t block_rows;  // B
  int32_t l;
  bool scores;
  size_t words() const { return static_cast<size_t>(block_rows) / 64; }
  size_t header_bytes() const { return 8 + words() * 12; }
  size_t row_bytes() const { return static_cast<size_t>(l) * 4 * (scores ? 2 : 1); }
  size_t encoded_bytes(uint32_t present) const { return header_bytes() + present * row_bytes(); }
};

// A parsed view of an encoded block (pointers into the pinned value).
struct BlockView {
  uint32_t present = 0;
  const char* bitmap = nullptr;
  const char* rank = nullptr;
  const char* labels = nullptr;
  const char* scores = nullptr;
};

bool ParseBlock(const rocksdb::Slice& value, const BlockLayout& layout, BlockView* view) {
  if (value.size() < layout.header_bytes()) return false;
  const char* p = value.data();
  view->present = Load32(p);
  if (view->present > static_cast<uint32_t>(layout.block_rows)) return false;
  if (value.size() != layout.encoded_bytes(view->present)) return false;
  view->bitmap = p + 8;
  view->rank = view->bitmap + layout.words() * 8;
  view->labels = view->rank + layout.words() * 4;
  view->scores = view->labels + static_cast<size_t>(view->present) * layout.l * 4;
  return true;
}

// Rank of the row at `offset` within the block, or -1 when the id has no row.
inline int64_t FindRow(const BlockView& view, uint32_t offset) {
  const uint32_t w = offset >> 6, bit = offset & 63;
  const uint64_t word = Load64(view.bitmap + w * 8);
  if (((word >> bit) & 1) == 0) return -1;
  const uint64_t below = bit == 0 ? 0 : (word & ((uint64_t{1} << bit) - 1));
  return static_cast<int64_t>(Load32(view.rank + w * 4)) + __builtin_popcountll(below);
}

// A block expanded for read-modify-write: every slot has room for a row.
struct DenseBlock {
  std::vector<uint64_t> bits;
  std::vector<int32_t> labels;
  std::vector<float> scores;
  uint32_t present = 0;

  void Reset(const BlockLayout& layout) {
    bits.assign(layout.words(), 0);
    labels.assign(static_cast<size_t>(layout.block_rows) * layout.l, -1);
    scores.assign(layout.scores ? labels.size() : 0, 0.0f);
    present = 0;
  }
};

bool DecodeDense(const rocksdb::Slice& value, const BlockLayout& layout, DenseBlock* dense) {
  BlockView view;
  if (!ParseBlock(value, layout, &view)) return false;
  dense->Reset(layout);
  const size_t l = static_cast<size_t>(layout.l);
  uint32_t rank = 0;
  for (size_t w = 0; w < layout.words(); ++w) {
    uint64_t word = Load64(view.bitmap + w * 8);
    dense->bits[w] = word;
    while (word != 0) {
      const size_t offset = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      word &= word - 1;
      if (rank >= view.present) return false;
      std::memcpy(&dense->labels[offset * l], view.labels + rank * l * 4, l * 4);
      if (layout.scores) std::memcpy(&dense->scores[offset * l], view.scores + rank * l * 4, l * 4);
      ++rank;
    }
  }
  if (rank != view.present) return false;
  dense->present = rank;
  return true;
}

void EncodeDense(const DenseBlock& dense, const BlockLayout& layout, std::string* out) {
  const size_t l = static_cast<size_t>(layout.l);
  out->assign(layout.encoded_bytes(dense.present), '\0');
  char* p = out->data();
  std::memcpy(p, &dense.present, 4);
  char* bitmap = p + 8;
  char* rank = bitmap + layout.words() * 8;
  char* labels = rank + layout.words() * 4;
  char* scores = labels + static_cast<size_t>(dense.present) * l * 4;
  uint32_t count = 0;
  for (size_t w = 0; w < layout.words(); ++w) {
    uint64_t word = dense.bits[w];
    std::memcpy(bitmap + w * 8, &word, 8);
    std::memcpy(rank + w * 4, &count, 4);
    while (word != 0) {
      const size_t offset = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      word &= word - 1;
      std::memcpy(labels + count * l * 4, &dense.labels[offset * l], l * 4);
      if (layout.scores) std::memcpy(scores + count * l * 4, &dense.scores[offset * l], l * 4);
      ++count;
    }
  }
}

int32_t ChooseBlockRows(size_t target_block_bytes, int32_t l, bool scores) {
  const size_t row_bytes = static_cast<size_t>(l) * 4 * (scores ? 2 : 1);
  int32_t rows = kMinBlockRows;
  while (rows < kMaxBlockRows && static_cast<size_t>(rows) * 2 * row_bytes <= target_block_bytes)
    rows *= 2;
  return rows;
}

// Prefetches the cache lines of [p, p + bytes) (the first 256 bytes of long rows).
inline void Prefetch(const char* p, size_t bytes) {
  const size_t span = std::min<size_t>(bytes, 256);
  for (size_t off = 0; off < span; off += 64) __builtin_prefetch(p + off);
  __builtin_prefetch(p + span - 1);
}

// memcpy with the common row sizes as compile-time constants (inlined moves).
inline void CopyRow(void* dst, const char* src, size_t bytes) {
  switch (bytes) {
    case 16:
      std::memcpy(dst, src, 16);
      break;
    case 32:
      std::memcpy(dst, src, 32);
      break;
    case 64:
      std::memcpy(dst, src, 64);
      break;
    default:
      std::memcpy(dst, src, bytes);
  }
}

// A located row waiting to be copied into the response.
struct RowCopy {
  uint32_t pos;        // request position
  const char* labels;  // in the pinned block
  const char* scores;  // nullptr unless scores were asked for
};

// Per-thread buffers of the read path, kept between calls so a steady read allocates nothing.
struct ReadScratch {
  std::vector<uint64_t> packed;                      // (block << kIndexBits) | request index
  std::vector<std::pair<uint64_t, uint32_t>> pairs;  // fallback when blocks are huge
  std::vector<uint32_t> cursor;                      // counting sort: per-block write offsets
  std::vector<uint32_t> order;                       // request positions grouped by block
  std::vector<uint64_t> blocks;                      // unique block numbers, ascending
  std::vector<uint32_t> group_begin;                 // first entry of each unique block
  std::string key_bytes;
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;
  std::vector<uint32_t> missing;
  std::vector<RowCopy> copies;
};
constexpr int kIndexBits = 20;  // > log2(kMaxIdsPerRead)
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
  BlockLayout layout() const { return BlockLayout{block_rows, l, with_scores}; }

  std::mutex write_mu;  // serialises Write/Seal/Delete of this set
  mutable std::mutex info_mu;
  v1::LabelSetInfo info;  // guarded by info_mu; changed only under write_mu
  std::atomic<bool> sealed{false};
  std::atomic<bool> deleted{false};

  v1::LabelSetInfo Info() const {
    std::lock_guard<std::mutex> lock(info_mu);
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
  MLCD_RETURN_IF_ERROR(storage->LoadSets());
  storage->bg_thread_ = std::thread([s = storage.get()] { s->BackgroundLoop(); });
  return storage;
}

Status LabelStorage::OpenDb() {
  cache_ = rocksdb::NewLRUCache(options_.block_cache_bytes, /*num_shard_bits=*/6);

  rocksdb::DBOptions db_options;
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
    if (value.size() < 16 || std::memcmp(value.data(), kRecordMagic, 4) != 0 ||
        !set->info.ParseFromArray(value.data() + 16, static_cast<int>(value.size() - 16))) {
      return Status::DataLoss("label set record '" + set->name + "' in " + options_.data_dir +
                              " is corrupt");
    }
    set->set_id = GetBigEndian64(value.data() + 4);
    set->block_rows = static_cast<int32_t>(Load32(value.data() + 12));
    if (set->block_rows < kMinBlockRows || (set->block_rows & (set->block_rows - 1)) != 0) {
      return Status::DataLoss("label set record '" + set->name + "' has block size " +
                              std::to_string(set->block_rows));
    }
    set->block_shift = __builtin_ctz(static_cast<unsigned>(set->block_rows));
    set->num_classes = set->info.num_classes();
    set->l = set->info.labels_per_sample();
    set->with_scores = set->info.with_scores();
    set->sealed = set->info.state() == v1::LABEL_SET_STATE_SEALED;
    next_set_id_ = std::max(next_set_id_, set->set_id + 1);
    sets_.emplace(set->name, std::move(set));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "reading label set records");
  MLCD_LOG(INFO) << "label store opened in " << options_.data_dir << " with " << sets_.size()
                 << " label sets";
  return Status::Ok();
}

LabelStorage::~LabelStorage() {
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (db_) db_->DisableManualCompaction();  // aborts a running CompactRange
  if (bg_thread_.joinable()) bg_thread_.join();
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
  std::shared_lock<std::shared_mutex> lock(sets_mu_);
  auto it = sets_.find(name);
  return it == sets_.end() ? nullptr : it->second;
}

Status LabelStorage::NotFound(const std::string& name) const {
  // Only a miss pays for the name check, so a malformed name gets the more useful answer.
  MLCD_RETURN_IF_ERROR(ValidateLabelSetName(name));
  return Status::NotFound("label set '" + name + "' does not exist (see `mlcdctl labels list`)");
}

std::string LabelStorage::EncodeRecord(const SetState& set, const v1::LabelSetInfo& info) const {
  std::string record(16, '\0');
  std::memcpy(record.data(), kRecordMagic, 4);
  PutBigEndian64(record.data() + 4, set.set_id);
  uint32_t rows = static_cast<uint32_t>(set.block_rows);
  std::memcpy(record.data() + 12, &rows, 4);
  info.AppendToString(&record);
  return record;
}

v1::LabelSetInfo LabelStorage::InfoWithSize(const SetState& set) const {
  v1::LabelSetInfo info = set.Info();
  auto [begin, end] = SetRange(set.set_id);
  rocksdb::Range range(begin, end);
  rocksdb::SizeApproximationOptions size_options;
  size_options.include_memtables = true;
  size_options.include_files = true;
  uint64_t bytes = 0;
  if (db_->GetApproximateSizes(size_options, blocks_cf_, &range, 1, &bytes).ok())
    info.set_size_bytes(bytes);
  return info;
}

StatusOr<v1::LabelSetInfo> LabelStorage::Create(const v1::CreateLabelSetRequest& request) {
  MLCD_RETURN_IF_ERROR(ValidateCreateRequest(request));
  std::lock_guard<std::mutex> create_lock(create_mu_);
  if (Find(request.name())) {
    return Status::AlreadyExists("label set '" + request.name() +
                                 "' already exists; pick another name or delete it first");
  }
  auto set = std::make_shared<SetState>();
  set->name = request.name();
  set->num_classes = request.num_classes();
  set->l = request.labels_per_sample();
  set->with_scores = request.with_scores();
  set->block_rows = ChooseBlockRows(options_.target_block_bytes, set->l, set->with_scores);
  set->block_shift = __builtin_ctz(static_cast<unsigned>(set->block_rows));
  uint64_t set_id;
  {
    std::shared_lock<std::shared_mutex> lock(sets_mu_);
    set_id = next_set_id_;
  }
  set->set_id = set_id;
  v1::LabelSetInfo& info = set->info;
  info.set_name(request.name());
  info.set_num_classes(request.num_classes());
  info.set_labels_per_sample(request.labels_per_sample());
  info.set_with_scores(request.with_scores());
  *info.mutable_metadata() = request.metadata();
  info.set_state(v1::LABEL_SET_STATE_OPEN);
  info.set_created_unix_ms(NowUnixMs());

  rocksdb::WriteBatch batch;
  char counter[8];
  PutBigEndian64(counter, set_id + 1);
  batch.Put(default_cf_, kNextSetIdKey, rocksdb::Slice(counter, 8));
  batch.Put(sets_cf_, set->name, EncodeRecord(*set, info));
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  MLCD_RETURN_IF_ERROR(
      FromRocks(db_->Write(write_options, &batch), "creating label set '" + set->name + "'"));
  {
    std::unique_lock<std::shared_mutex> lock(sets_mu_);
    next_set_id_ = set_id + 1;
    sets_.emplace(set->name, set);
  }
  MLCD_LOG(INFO) << "created label set '" << set->name << "' (k=" << set->num_classes
                 << ", l=" << set->l << (set->with_scores ? ", with scores" : "") << ", "
                 << set->block_rows << " rows per block)";
  return InfoWithSize(*set);
}

StatusOr<WriteResult> LabelStorage::Write(const std::string& name,
                                          const v1::WriteLabelsRequest& message) {
  auto set = Find(name);
  if (!set) return NotFound(name);
  std::lock_guard<std::mutex> write_lock(set->write_mu);
  if (set->deleted) return NotFound(name);
  if (set->sealed) {
    return Status::FailedPrecondition("label set '" + name +
                                      "' is sealed and immutable; write to a new set instead");
  }
  std::vector<uint64_t> sorted_ids;
  MLCD_RETURN_IF_ERROR(ValidateWriteMessage(
      message, LabelSetShape{set->num_classes, set->l, set->with_scores}, &sorted_ids));

  const size_t n = static_cast<size_t>(message.sample_ids_size());
  const size_t l = static_cast<size_t>(set->l);
  const BlockLayout layout = set->layout();
  const uint64_t* ids = message.sample_ids().data();

  // Rows ordered by id, so rows of one block are adjacent.
  std::vector<std::pair<uint64_t, uint32_t>> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = {ids[i], static_cast<uint32_t>(i)};
  std::sort(order.begin(), order.end());

  std::vector<uint64_t> blocks;
  std::vector<size_t> group_begin;
  for (size_t i = 0; i < n; ++i) {
    uint64_t block = order[i].first >> set->block_shift;
    if (blocks.empty() || blocks.back() != block) {
      blocks.push_back(block);
      group_begin.push_back(i);
    }
  }
  group_begin.push_back(n);

  std::string key_bytes(blocks.size() * kBlockKeyBytes, '\0');
  std::vector<rocksdb::Slice> keys(blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) {
    EncodeBlockKey(key_bytes.data() + b * kBlockKeyBytes, set->set_id, blocks[b]);
    keys[b] = rocksdb::Slice(key_bytes.data() + b * kBlockKeyBytes, kBlockKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> values(blocks.size());
  std::vector<rocksdb::Status> statuses(blocks.size());
  db_->MultiGet(rocksdb::ReadOptions(), blocks_cf_, blocks.size(), keys.data(), values.data(),
                statuses.data(),
                /*sorted_input=*/true);

  const int32_t* labels = message.labels().data();
  const float* scores = set->with_scores ? message.scores().data() : nullptr;
  rocksdb::WriteBatch batch;
  DenseBlock dense;
  std::string encoded;
  uint64_t new_samples = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (statuses[b].ok()) {
      if (!DecodeDense(values[b], layout, &dense)) {
        return Status::DataLoss("block " + std::to_string(blocks[b]) + " of label set '" + name +
                                "' is corrupt");
      }
    } else if (statuses[b].IsNotFound()) {
      dense.Reset(layout);
    } else {
      return FromRocks(statuses[b], "reading block " + std::to_string(blocks[b]) +
                                        " of label set '" + name + "'");
    }
    for (size_t i = group_begin[b]; i < group_begin[b + 1]; ++i) {
      const size_t offset = order[i].first & static_cast<uint64_t>(set->block_rows - 1);
      const size_t row = order[i].second;
      uint64_t& word = dense.bits[offset >> 6];
      const uint64_t bit = uint64_t{1} << (offset & 63);
      if ((word & bit) == 0) {
        word |= bit;
        ++dense.present;
        ++new_samples;
      }
      std::memcpy(&dense.labels[offset * l], labels + row * l, l * 4);
      if (scores) std::memcpy(&dense.scores[offset * l], scores + row * l, l * 4);
    }
    EncodeDense(dense, layout, &encoded);
    batch.Put(blocks_cf_, keys[b], encoded);
  }
  for (auto& value : values) value.Reset();

  v1::LabelSetInfo info = set->Info();
  info.set_num_samples(info.num_samples() + new_samples);
  const uint64_t max_id = order.back().first;
  if (max_id != std::numeric_limits<uint64_t>::max()) {
    info.set_sample_id_end(std::max<uint64_t>(info.sample_id_end(), max_id + 1));
  } else {
    info.set_sample_id_end(max_id);
  }
  batch.Put(sets_cf_, name, EncodeRecord(*set, info));
  MLCD_RETURN_IF_ERROR(FromRocks(db_->Write(rocksdb::WriteOptions(), &batch),
                                 "writing rows of label set '" + name + "'"));
  {
    std::lock_guard<std::mutex> lock(set->info_mu);
    set->info = info;
  }
  return WriteResult{n, new_samples, info.num_samples()};
}

Status LabelStorage::SyncWal() { return FromRocks(db_->SyncWAL(), "syncing the label store WAL"); }

StatusOr<v1::LabelSetInfo> LabelStorage::Seal(const std::string& name, bool require_open) {
  auto set = Find(name);
  if (!set) return NotFound(name);
  std::lock_guard<std::mutex> write_lock(set->write_mu);
  if (set->deleted) return NotFound(name);
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
  MLCD_RETURN_IF_ERROR(FromRocks(db_->Put(write_options, sets_cf_, name, EncodeRecord(*set, info)),
                                 "sealing label set '" + name + "'"));
  {
    std::lock_guard<std::mutex> lock(set->info_mu);
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
    std::shared_lock<std::shared_mutex> lock(sets_mu_);
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
                                                          bool allow_missing) {
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
    std::lock_guard<std::mutex> write_lock(set->write_mu);
    if (set->deleted) {
      if (allow_missing) return response;
      return NotFound(name);
    }
    auto [begin, end] = SetRange(set->set_id);
    rocksdb::WriteBatch batch;
    batch.DeleteRange(blocks_cf_, begin, end);
    batch.Delete(sets_cf_, name);
    rocksdb::WriteOptions write_options;
    write_options.sync = true;
    MLCD_RETURN_IF_ERROR(
        FromRocks(db_->Write(write_options, &batch), "deleting label set '" + name + "'"));
    set->deleted = true;
    response.set_deleted(true);
    response.set_rows_deleted(set->Info().num_samples());
  }
  {
    std::unique_lock<std::shared_mutex> lock(sets_mu_);
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
  // Group request positions by block (s.order: positions, block by block, blocks ascending).
  //  - blocks spanning a small range (the usual case: dense ids): counting sort, O(n + span);
  //  - else sort (block, position) packed into one u64 (ids < 2^44 * B), else as pairs.
  uint64_t min_block = ~uint64_t{0}, max_block = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t block = ids[i] >> shift;
    min_block = std::min(min_block, block);
    max_block = std::max(max_block, block);
  }
  const uint64_t span = max_block - min_block + 1;
  s.blocks.clear();
  s.group_begin.clear();
  s.order.resize(n);
  if (span <= std::max<uint64_t>(4096, 4 * static_cast<uint64_t>(n))) {
    s.cursor.assign(span, 0);
    for (size_t i = 0; i < n; ++i) ++s.cursor[(ids[i] >> shift) - min_block];
    uint32_t offset = 0;
    for (uint64_t b = 0; b < span; ++b) {
      const uint32_t count = s.cursor[b];
      s.cursor[b] = offset;
      if (count > 0) {
        s.blocks.push_back(min_block + b);
        s.group_begin.push_back(offset);
        offset += count;
      }
    }
    for (size_t i = 0; i < n; ++i)
      s.order[s.cursor[(ids[i] >> shift) - min_block]++] = static_cast<uint32_t>(i);
  } else if (max_block < (uint64_t{1} << (64 - kIndexBits))) {
    s.packed.resize(n);
    for (size_t i = 0; i < n; ++i) s.packed[i] = ((ids[i] >> shift) << kIndexBits) | i;
    std::sort(s.packed.begin(), s.packed.end());
    for (size_t i = 0; i < n; ++i) {
      const uint64_t block = s.packed[i] >> kIndexBits;
      s.order[i] = static_cast<uint32_t>(s.packed[i] & ((uint64_t{1} << kIndexBits) - 1));
      if (s.blocks.empty() || s.blocks.back() != block) {
        s.blocks.push_back(block);
        s.group_begin.push_back(static_cast<uint32_t>(i));
      }
    }
  } else {
    s.pairs.resize(n);
    for (size_t i = 0; i < n; ++i) s.pairs[i] = {ids[i] >> shift, static_cast<uint32_t>(i)};
    std::sort(s.pairs.begin(), s.pairs.end());
    for (size_t i = 0; i < n; ++i) {
      s.order[i] = s.pairs[i].second;
      if (s.blocks.empty() || s.blocks.back() != s.pairs[i].first) {
        s.blocks.push_back(s.pairs[i].first);
        s.group_begin.push_back(static_cast<uint32_t>(i));
      }
    }
  }
  s.group_begin.push_back(static_cast<uint32_t>(n));
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
    if (!ParseBlock(s.values[b], layout, &view)) {
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
      s.copies.push_back(RowCopy{pos, labels, scores});
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
    std::lock_guard<std::mutex> lock(bg_mu_);
    bg_queue_.push_back(set_id);
  }
  bg_cv_.notify_all();
}

void LabelStorage::BackgroundLoop() {
  std::unique_lock<std::mutex> lock(bg_mu_);
  while (true) {
    bg_cv_.wait(lock, [this] { return bg_stop_ || !bg_queue_.empty(); });
    if (bg_stop_) return;
    const uint64_t set_id = bg_queue_.front();
    bg_queue_.pop_front();
    bg_busy_ = true;
    lock.unlock();
    auto [begin, end] = SetRange(set_id);
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
    lock.lock();
    bg_busy_ = false;
    bg_cv_.notify_all();
  }
}

void LabelStorage::WaitForBackgroundWork() {
  std::unique_lock<std::mutex> lock(bg_mu_);
  bg_cv_.wait(lock, [this] { return bg_stop_ || (bg_queue_.empty() && !bg_busy_); });
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
  std::shared_lock<std::shared_mutex> lock(sets_mu_);
  return sets_.size();
}

}  // namespace mlcd::labelstore
