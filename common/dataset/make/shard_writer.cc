#include "common/dataset/make/shard_writer.h"

#include <archive_entry.h>

#include <cstdio>

namespace mlcd {

void ShardWriter::ArchiveFree::operator()(struct archive* a) const { archive_write_free(a); }

ShardWriter::ShardWriter(std::string dir, int64_t samples_per_shard)
    : dir_(std::move(dir)), samples_per_shard_(samples_per_shard < 1 ? 1 : samples_per_shard) {}

ShardWriter::~ShardWriter() = default;

Status ShardWriter::Error(const std::string& what) const {
  const char* err = archive_ == nullptr ? nullptr : archive_error_string(archive_.get());
  return Status::Internal("cannot " + what + " shard '" +
                          (shards_.empty() ? dir_ : shards_.back()) +
                          "': " + (err ? err : "libarchive error"));
}

Status ShardWriter::Open() {
  char name[32];
  std::snprintf(name, sizeof(name), "/%05zu.tar", shards_.size());
  shards_.push_back(dir_ + name);
  archive_.reset(archive_write_new());
  if (archive_ == nullptr) return Status::Internal("libarchive: cannot create a writer");
  if (archive_write_set_format_ustar(archive_.get()) != ARCHIVE_OK ||
      archive_write_add_filter_none(archive_.get()) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(archive_.get(), 1) != ARCHIVE_OK ||
      archive_write_open_filename(archive_.get(), shards_.back().c_str()) != ARCHIVE_OK) {
    return Error("open");
  }
  in_shard_ = 0;
  return Status::Ok();
}

Status ShardWriter::Add(const std::string& key, const std::vector<ShardMember>& members) {
  if (archive_ == nullptr || in_shard_ == samples_per_shard_) {
    MLCD_RETURN_IF_ERROR(Close());
    MLCD_RETURN_IF_ERROR(Open());
  }
  for (const ShardMember& m : members) {
    std::unique_ptr<struct archive_entry, void (*)(struct archive_entry*)> entry(
        archive_entry_new(), archive_entry_free);
    const std::string name = key + "." + m.extension;
    archive_entry_set_pathname(entry.get(), name.c_str());
    archive_entry_set_filetype(entry.get(), AE_IFREG);
    archive_entry_set_perm(entry.get(), 0644);
    archive_entry_set_size(entry.get(), static_cast<la_int64_t>(m.data.size()));
    archive_entry_set_mtime(entry.get(), 0, 0);
    archive_entry_set_uid(entry.get(), 0);
    archive_entry_set_gid(entry.get(), 0);
    if (archive_write_header(archive_.get(), entry.get()) != ARCHIVE_OK) {
      return Error("write member '" + name + "' to");
    }
    if (!m.data.empty() && archive_write_data(archive_.get(), m.data.data(), m.data.size()) !=
                               static_cast<la_ssize_t>(m.data.size())) {
      return Error("write member '" + name + "' to");
    }
  }
  ++in_shard_;
  return Status::Ok();
}

Status ShardWriter::Close() {
  if (archive_ == nullptr) return Status::Ok();
  if (archive_write_close(archive_.get()) != ARCHIVE_OK) return Error("finish");
  archive_.reset();
  return Status::Ok();
}

}  // namespace mlcd
