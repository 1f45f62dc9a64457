#include "labelstore/block_format.h"

namespace mlcd::labelstore {
namespace {

constexpr char kRecordMagic[4] = {'L', 'S', 'R', '1'};
constexpr size_t kRecordHeaderBytes = 16;  // magic, be64 set id, u32 block rows

}  // namespace

std::pair<std::string, std::string> SetKeyRange(uint64_t set_id) {
  std::string begin(8, '\0'), end(8, '\0');
  PutBigEndian64(begin.data(), set_id);
  PutBigEndian64(end.data(), set_id + 1);
  return {begin, end};
}

std::string EncodeSetRecord(uint64_t set_id, int32_t block_rows, const v1::LabelSetInfo& info) {
  std::string record(kRecordHeaderBytes, '\0');
  std::memcpy(record.data(), kRecordMagic, 4);
  PutBigEndian64(record.data() + 4, set_id);
  const uint32_t rows = static_cast<uint32_t>(block_rows);
  std::memcpy(record.data() + 12, &rows, 4);
  info.AppendToString(&record);
  return record;
}

bool DecodeSetRecord(const char* data, size_t size, SetRecord* record) {
  if (size < kRecordHeaderBytes || std::memcmp(data, kRecordMagic, 4) != 0 ||
      !record->info.ParseFromArray(data + kRecordHeaderBytes,
                                   static_cast<int>(size - kRecordHeaderBytes))) {
    return false;
  }
  record->set_id = GetBigEndian64(data + 4);
  record->block_rows = static_cast<int32_t>(Load32(data + 12));
  return true;
}

int32_t ChooseBlockRows(size_t target_block_bytes, int32_t l, bool scores) {
  const size_t row_bytes = static_cast<size_t>(l) * 4 * (scores ? 2 : 1);
  int32_t rows = kMinBlockRows;
  while (rows < kMaxBlockRows && static_cast<size_t>(rows) * 2 * row_bytes <= target_block_bytes)
    rows *= 2;
  return rows;
}

bool DecodeDense(const char* data, size_t size, const BlockLayout& layout, DenseBlock* dense) {
  BlockView view;
  if (!ParseBlock(data, size, layout, &view)) return false;
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

}  // namespace mlcd::labelstore
