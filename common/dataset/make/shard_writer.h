// Writes WebDataset shards (plain ustar tars, libarchive) as img2dataset lays them out:
// `<dir>/00000.tar`, `00001.tar`, ... of at most `samples_per_shard` samples each, a sample
// being consecutive members `<key>.<extension>`. Members carry fixed metadata (mode 0644,
// mtime 0, owner 0), so the same samples give the same bytes.
#pragma once

#include <archive.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mlcd {

// One member of a sample: its extension ("png", "labels", "shape.cls") and bytes.
struct ShardMember {
  std::string extension;
  std::string data;
};

class ShardWriter {
 public:
  // `dir` must exist; `samples_per_shard` >= 1.
  ShardWriter(std::string dir, int64_t samples_per_shard);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends a sample, opening the next shard when the current one is full. INTERNAL naming
  // the shard when libarchive fails (e.g. the disk is full).
  Status Add(const std::string& key, const std::vector<ShardMember>& members);
  // Finishes the last shard. Must be called once after the last Add.
  Status Close();
  // The shards written so far, in order.
  const std::vector<std::string>& shards() const { return shards_; }

 private:
  struct ArchiveFree {
    void operator()(struct archive* a) const;
  };
  Status Open();
  Status Error(const std::string& what) const;

  std::string dir_;
  int64_t samples_per_shard_;
  int64_t in_shard_ = 0;
  std::vector<std::string> shards_;
  std::unique_ptr<struct archive, ArchiveFree> archive_;
};

}  // namespace mlcd
