// The read path's batch of one GetLabels call (labelstore/storage.h): the request's sample ids
// grouped by block, so each block is looked up once (one RocksDB MultiGet for the batch), and
// the rows located in the pinned blocks before any is copied. Per-thread scratch keeps a steady
// read free of allocations.
#pragma once

#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace mlcd::labelstore {

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
  // A constructor, so that emplace_back builds the entry in place: a temporary copied in with
  // 16-byte moves stalls the locate loop on store forwarding (~4% of a batch-8192 read).
  RowCopy(uint32_t pos, const char* labels, const char* scores)
      : pos(pos), labels(labels), scores(scores) {}
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
// Bits of a request index in ReadScratch::packed: > log2(kMaxIdsPerRead), which storage.cc
// checks.
constexpr int kIndexBits = 20;

// Groups the request positions of `ids` by block (block = id >> shift): s->order holds the
// positions block by block, blocks ascending; s->blocks the unique blocks; s->group_begin the
// first entry of each block in s->order, then n. Dense ids (the usual case) take a counting
// sort, O(n + blocks spanned).
void GroupByBlock(const uint64_t* ids, size_t n, int shift, ReadScratch* scratch);

}  // namespace mlcd::labelstore
