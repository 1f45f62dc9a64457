// The label store's on-disk format, byte by byte: the keys and values that
// labelstore/storage.h keeps in RocksDB (storage.h says which column family holds what).
// Nothing here touches RocksDB; a change here is a change of the format of existing
// databases.
//
// Keys and counters (big-endian, so byte order is numeric order):
//   block key   be64(set id) + be64(block number)   16 bytes; a set's blocks are one
//               contiguous key range, in sample-id order
//   counter     be64(next set id)
//
// Set record (value of a set's name):
//   "LSR1" | be64(set id) | u32 block rows B | serialized v1::LabelSetInfo
//
// Block (value of a block key), holding the rows of the B consecutive sample ids
// [b*B, (b+1)*B) of block b; B is a power of two >= 64 fixed per set at creation, integers are
// little-endian (the machine's: x86-64 and aarch64):
//   u32 present | u32 reserved (0)
//   u64 bitmap[W]           bit j of word w: sample id b*B + 64*w + j has a row (W = B/64)
//   u32 rank[W]             set bits in words [0, w)
//   i32 labels[present][l]  rows of the present ids, ascending
//   f32 scores[present][l]  only for sets with scores
// A block's size is fully determined by (B, l, scores, present), which decoding checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "mlcd/v1/labelstore.pb.h"

namespace mlcd::labelstore {

// ---- Integers.

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

// ---- Keys.

constexpr size_t kBlockKeyBytes = 16;
inline void EncodeBlockKey(char* out, uint64_t set_id, uint64_t block) {
  PutBigEndian64(out, set_id);
  PutBigEndian64(out + 8, block);
}
// [begin, end) covering every block key of a set.
std::pair<std::string, std::string> SetKeyRange(uint64_t set_id);

// ---- Set records.

// What a set record holds besides the name (its key).
struct SetRecord {
  uint64_t set_id = 0;
  int32_t block_rows = 0;  // B
  v1::LabelSetInfo info;
};
std::string EncodeSetRecord(uint64_t set_id, int32_t block_rows, const v1::LabelSetInfo& info);
// False when the value is no set record (wrong magic, short, or an unparsable info). Does not
// check block_rows (see ValidBlockRows).
bool DecodeSetRecord(const char* data, size_t size, SetRecord* record);

// ---- Blocks.

// Rows per block: B is a power of two in [kMinBlockRows, kMaxBlockRows].
constexpr int32_t kMinBlockRows = 64;
constexpr int32_t kMaxBlockRows = 16384;
// The largest power of two B in [kMinBlockRows, kMaxBlockRows] with B * row bytes <=
// target_block_bytes (kMinBlockRows when even that is larger).
int32_t ChooseBlockRows(size_t target_block_bytes, int32_t l, bool scores);
// Whether a stored B can be used: a power of two >= kMinBlockRows.
inline bool ValidBlockRows(int32_t rows) {
  return rows >= kMinBlockRows && (rows & (rows - 1)) == 0;
}

// The shape of a set's blocks.
struct BlockLayout {
  int32_t block_rows;  // B
  int32_t l;
  bool scores;
  size_t words() const { return static_cast<size_t>(block_rows) / 64; }
  size_t header_bytes() const { return 8 + words() * 12; }
  size_t row_bytes() const { return static_cast<size_t>(l) * 4 * (scores ? 2 : 1); }
  size_t encoded_bytes(uint32_t present) const { return header_bytes() + present * row_bytes(); }
};

// A parsed view of an encoded block (pointers into the encoded bytes, which must outlive it).
struct BlockView {
  uint32_t present = 0;
  const char* bitmap = nullptr;
  const char* rank = nullptr;
  const char* labels = nullptr;
  const char* scores = nullptr;
};

// False when the bytes are not a block of this layout (too short, more rows than B, or a size
// other than the one `present` implies). The read path's per-block step, hence inline.
inline bool ParseBlock(const char* data, size_t size, const BlockLayout& layout, BlockView* view) {
  if (size < layout.header_bytes()) return false;
  view->present = Load32(data);
  if (view->present > static_cast<uint32_t>(layout.block_rows)) return false;
  if (size != layout.encoded_bytes(view->present)) return false;
  view->bitmap = data + 8;
  view->rank = view->bitmap + layout.words() * 8;
  view->labels = view->rank + layout.words() * 4;
  view->scores = view->labels + static_cast<size_t>(view->present) * layout.l * 4;
  return true;
}

// Rank of the row at `offset` (< B) within the block, or -1 when the id has no row. The read
// path's per-row step, hence inline.
inline int64_t FindRow(const BlockView& view, uint32_t offset) {
  const uint32_t w = offset >> 6, bit = offset & 63;
  const uint64_t word = Load64(view.bitmap + w * 8);
  if (((word >> bit) & 1) == 0) return -1;
  const uint64_t below = bit == 0 ? 0 : (word & ((uint64_t{1} << bit) - 1));
  return static_cast<int64_t>(Load32(view.rank + w * 4)) + __builtin_popcountll(below);
}

// A block expanded for read-modify-write: every slot has room for a row (labels -1 and
// scores 0 where no row is present).
struct DenseBlock {
  std::vector<uint64_t> bits;
  std::vector<int32_t> labels;
  std::vector<float> scores;
  uint32_t present = 0;

  // An empty block of `layout`.
  void Reset(const BlockLayout& layout) {
    bits.assign(layout.words(), 0);
    labels.assign(static_cast<size_t>(layout.block_rows) * layout.l, -1);
    scores.assign(layout.scores ? labels.size() : 0, 0.0f);
    present = 0;
  }

  // Sets the row at `offset` (< B) from l labels, and l scores unless row_scores is null
  // (the write path's per-row step, hence inline). True when the slot was empty before.
  bool SetRow(const BlockLayout& layout, size_t offset, const int32_t* row_labels,
              const float* row_scores) {
    const size_t l = static_cast<size_t>(layout.l);
    uint64_t& word = bits[offset >> 6];
    const uint64_t bit = uint64_t{1} << (offset & 63);
    const bool added = (word & bit) == 0;
    if (added) {
      word |= bit;
      ++present;
    }
    std::memcpy(&labels[offset * l], row_labels, l * 4);
    if (row_scores) std::memcpy(&scores[offset * l], row_scores, l * 4);
    return added;
  }
};

// Expands an encoded block; false when it is corrupt (ParseBlock fails, or the bitmap and
// `present` disagree).
bool DecodeDense(const char* data, size_t size, const BlockLayout& layout, DenseBlock* dense);
// Encodes `dense` (replacing *out).
void EncodeDense(const DenseBlock& dense, const BlockLayout& layout, std::string* out);

}  // namespace mlcd::labelstore
