// mlcdctl admin commands: backup (mlcd.v1.Coordinator.BackupState; docs/deploy.md, "Backups").
//
//   mlcdctl admin backup --out /backups/mlcd-2026-11-26
//
// The coordinator takes an online RocksDB checkpoint of its state and streams it; mlcdctl
// writes the files into DIR.partial and renames it to DIR once every file is complete and
// synced, so DIR exists only as a whole backup. Restore: the directory becomes a fresh
// coordinator's <data-dir>/db.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "client/cli.h"
#include "clients/coordinator_client.h"
#include "common/file_util.h"
#include "common/grpc_server.h"
#include "mlcd/v1/coordinator.grpc.pb.h"

namespace mlcd::cli {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The open files of a backup being written.
class BackupWriter {
 public:
  explicit BackupWriter(std::string dir) : dir_(std::move(dir)) {}
  ~BackupWriter() {
    for (auto& [name, fd] : open_) ::close(fd);
  }

  Status Write(const v1::BackupChunk& chunk) {
    const std::string& name = chunk.file();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return Status::DataLoss("the coordinator sent a backup file named '" + name + "'");
    }
    auto it = open_.find(name);
    if (it == open_.end()) {
      if (done_.count(name)) return Status::DataLoss("backup file " + name + " sent twice");
      const std::string path = dir_ + "/" + name;
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) return Status::Internal("cannot create " + path);
      it = open_.emplace(name, fd).first;
    }
    const std::string& data = chunk.data();
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(it->second, data.data() + off, data.size() - off);
      if (n <= 0) return Status::Internal("writing " + dir_ + "/" + name + " failed");
      off += static_cast<size_t>(n);
    }
    bytes_ += static_cast<int64_t>(data.size());
    if (chunk.end_of_file()) {
      if (::fsync(it->second) != 0) return Status::Internal("fsync of " + name + " failed");
      ::close(it->second);
      open_.erase(it);
      done_.insert(name);
    }
    return Status::Ok();
  }

  Status Finish() {
    if (!open_.empty()) {
      return Status::DataLoss("the backup stream ended inside " + open_.begin()->first);
    }
    if (done_.empty()) return Status::DataLoss("the coordinator sent an empty backup");
    return SyncDir(dir_);
  }
  size_t files() const { return done_.size(); }
  int64_t bytes() const { return bytes_; }

 private:
  std::string dir_;
  std::map<std::string, int> open_;
  std::set<std::string> done_;
  int64_t bytes_ = 0;
};

int RunBackup(Context& ctx, const std::string& out) {
  if (out.empty()) return ctx.Fail(Status::InvalidArgument("--out DIR is required"));
  if (Exists(out)) {
    return ctx.Fail(Status::AlreadyExists(
        out + " exists; give a new directory (a backup never overwrites another)"));
  }
  const std::string partial = out + ".partial";
  if (Exists(partial)) {
    return ctx.Fail(
        Status::AlreadyExists(partial + " exists (an interrupted backup?); remove it first"));
  }
  Status s = MakeDirs(partial);
  if (!s.ok()) return ctx.Fail(s);
  auto stub = coordinator::NewCoordinatorStub(ctx.coordinator);
  grpc::ClientContext context;
  InterruptGuard interrupt;
  InterruptGuard::Cancel cancel(&interrupt, [&context] { context.TryCancel(); });
  std::unique_ptr<grpc::ClientReader<v1::BackupChunk>> reader(
      stub->BackupState(&context, v1::BackupStateRequest()));
  BackupWriter writer(partial);
  v1::BackupChunk chunk;
  int format_version = 0;
  Status write_status;
  while (write_status.ok() && reader->Read(&chunk)) {
    if (chunk.format_version() > 0) format_version = chunk.format_version();
    write_status = writer.Write(chunk);
  }
  if (!write_status.ok()) context.TryCancel();
  s = FromGrpcStatus(reader->Finish());
  if (s.ok()) s = write_status;
  if (s.ok()) s = writer.Finish();
  if (s.ok() && ::rename(partial.c_str(), out.c_str()) != 0)
    s = Status::Internal("cannot rename " + partial + " to " + out);
  if (!s.ok()) {
    if (s.code() == StatusCode::kUnavailable) {
      s = Status::Unavailable("cannot reach the coordinator at " + ctx.coordinator + " (" +
                              s.message() + "); set --coordinator / MLCD_COORDINATOR");
    }
    return ctx.Fail(
        s.WithContext("backup into " + out + " (partial files left in " + partial + ")"));
  }
  if (ctx.format() == OutputFormat::kJson) {
    std::printf("{\"out\": \"%s\", \"files\": %zu, \"bytes\": %lld, \"format_version\": %d}\n",
                out.c_str(), writer.files(), static_cast<long long>(writer.bytes()),
                format_version);
  } else {
    std::printf(
        "backed up the coordinator's state (format version %d): %zu files, %lld bytes in %s\n"
        "restore: stop the coordinator, make %s its <data-dir>/db (docs/deploy.md, "
        "\"Backups\")\n",
        format_version, writer.files(), static_cast<long long>(writer.bytes()), out.c_str(),
        out.c_str());
  }
  return kExitOk;
}

CommandRegistration reg(5, [](CLI::App& app, Context& ctx) {
  auto* admin = app.add_subcommand("admin", "Administration of the services (backups).");
  admin->require_subcommand(1);
  auto out = std::make_shared<std::string>();
  auto* backup = admin->add_subcommand(
      "backup",
      "Take an online backup of the coordinator's state (jobs, history, workers) into DIR:\n"
      "a consistent RocksDB checkpoint, taken while jobs run. Restore by making DIR a\n"
      "stopped coordinator's <data-dir>/db (docs/deploy.md, \"Backups\").\n"
      "  mlcdctl admin backup --out /backups/mlcd-$(date +%F)");
  backup->add_option("--out", *out, "directory to create (must not exist)")->required();
  backup->callback([&ctx, out] { ctx.exit_code = RunBackup(ctx, *out); });
});

}  // namespace
}  // namespace mlcd::cli
