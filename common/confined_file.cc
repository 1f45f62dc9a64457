#include "common/confined_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <random>

namespace mlcd {
namespace {

std::atomic<const DataRoots*> g_process_roots{nullptr};

const DataRoots* RootsOr(const DataRoots* roots) {
  return roots != nullptr ? roots : ProcessDataRoots();
}

// `path` taken from the working directory when relative.
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  const std::string here = ::getcwd(cwd, sizeof(cwd)) ? cwd : "/";
  return here + "/" + path;
}

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  if (err == ENOENT) return Status::NotFound(path + ": no such file or directory");
  const std::string msg = path + ": " + what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  if (err == EACCES || err == EPERM) return Status::PermissionDenied(msg);
  if (err == ENOTDIR || err == EISDIR || err == ELOOP) return Status::InvalidArgument(msg);
  return Status::Internal(msg);
}

// An open of `path` failed with `err`: with roots, a path that (now) resolves outside them is
// the refusal, so a failed open tells nothing of what lies outside; else the errno's status.
Status OpenFailure(const std::string& what, const std::string& path, const std::string& field,
                   const DataRoots* roots, int err) {
  if (roots != nullptr) {
    StatusOr<std::string> inside = roots->Confine(Absolute(path), field);
    if (!inside.ok()) return inside.status();
  }
  return ErrnoStatus(what, path, err);
}

bool OneComponent(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// Splits an absolute path into its components ("" and "." dropped).
std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    std::string c = path.substr(start, slash - start);
    if (!c.empty() && c != ".") out.push_back(std::move(c));
    start = slash + 1;
  }
  return out;
}

std::string JoinFirst(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += "/" + parts[i];
  return out.empty() ? "/" : out;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

void InstallProcessDataRoots(const DataRoots& roots) {
  // Kept for the life of the process: readers may hold the pointer while another install runs.
  g_process_roots.store(new DataRoots(roots));
}

const DataRoots* ProcessDataRoots() { return g_process_roots.load(); }

Status VerifyOpenedUnderRoots(int fd, const std::string& path, const std::string& field,
                              const DataRoots& roots) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  char buf[PATH_MAX + 1];
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0 || buf[0] != '/') {
    // No /proc (or a descriptor the kernel cannot name): nothing proves where it lies.
    return roots.Refusal(path, field);
  }
  return roots.Holds(std::string(buf, static_cast<size_t>(n))) ? Status::Ok()
                                                               : roots.Refusal(path, field);
}

StatusOr<UniqueFd> OpenConfinedRead(const std::string& path, const std::string& field,
                                    const DataRoots* given) {
  const DataRoots* roots = RootsOr(given);
  if (path.empty()) return Status::InvalidArgument(field + ": empty path");
  if (roots != nullptr) MLCD_RETURN_IF_ERROR(roots->Confine(Absolute(path), field).status());
  // Non-blocking so that opening a FIFO swapped in cannot hang; cleared once verified.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return OpenFailure("open", path, field, roots, errno);
  if (roots != nullptr) MLCD_RETURN_IF_ERROR(VerifyOpenedUnderRoots(fd.get(), path, field, *roots));
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string ConfinedDir::Join(const std::string& name) const {
  return path_ + (!path_.empty() && path_.back() == '/' ? "" : "/") + name;
}

std::string ConfinedDir::PinnedPath(const std::string& name) const {
  const std::string dir = "/proc/self/fd/" + std::to_string(fd_.get());
  return name.empty() ? dir : dir + "/" + name;
}

Status ConfinedDir::WriteTemporary(const std::string& name, const std::vector<ConstBuffer>& parts,
                                   std::string* tmp) const {
  if (!OneComponent(name)) return Status::InvalidArgument("'" + name + "' is not a file name");
  // A process-wide counter, not a thread_local generator: static TLS is taken from every
  // thread's stack, and a library's small-stack threads (100 KiB stacks have overflowed
  // with it).
  static std::atomic<uint64_t> counter{std::random_device{}()};
  UniqueFd fd;
  for (int attempt = 0; attempt < 16 && !fd.valid(); ++attempt) {
    *tmp = name + ".tmp." + std::to_string(::getpid()) + "." +
           std::to_string(counter.fetch_add(1) % 1000000);
    fd = UniqueFd(::openat(fd_.get(), tmp->c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid() && errno != EEXIST) break;
  }
  if (!fd.valid()) return ErrnoStatus("create", Join(*tmp), errno);
  Status written = WriteAllAndSync(fd.get(), parts, Join(*tmp));
  if (!written.ok()) ::unlinkat(fd_.get(), tmp->c_str(), 0);
  return written;
}

Status ConfinedDir::WriteFileAtomically(const std::string& name,
                                        const std::vector<ConstBuffer>& parts) const {
  std::string tmp;
  MLCD_RETURN_IF_ERROR(WriteTemporary(name, parts, &tmp));
  if (::renameat(fd_.get(), tmp.c_str(), fd_.get(), name.c_str()) != 0) {
    Status failed = ErrnoStatus("rename into place", Join(name), errno);
    ::unlinkat(fd_.get(), tmp.c_str(), 0);
    return failed;
  }
  return Sync();
}

Status ConfinedDir::CreateFileExclusively(const std::string& name,
                                          const std::string& contents) const {
  std::string tmp;
  MLCD_RETURN_IF_ERROR(WriteTemporary(name, {{contents.data(), contents.size()}}, &tmp));
  const int linked = ::linkat(fd_.get(), tmp.c_str(), fd_.get(), name.c_str(), 0);
  const int err = errno;
  ::unlinkat(fd_.get(), tmp.c_str(), 0);
  if (linked != 0) {
    if (err == EEXIST) return Status::AlreadyExists(Join(name) + " exists");
    return ErrnoStatus("link into place", Join(name), err);
  }
  return Sync();
}

StatusOr<std::string> ConfinedDir::ReadFilePrefix(const std::string& name, size_t max_bytes,
                                                  bool* truncated) const {
  if (!OneComponent(name)) return Status::InvalidArgument("'" + name + "' is not a file name");
  UniqueFd fd(
      ::openat(fd_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP) return Status::FailedPrecondition(Join(name) + ": is a symbolic link");
    return ErrnoStatus("open", Join(name), errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat", Join(name), errno);
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(Join(name) + ": not a regular file");
  std::string out(max_bytes + 1, '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read", Join(name), errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (truncated) *truncated = got > max_bytes;
  out.resize(std::min(got, max_bytes));
  return out;
}

Status ConfinedDir::WriteFileAtomically(const std::string& name,
                                        const std::string& contents) const {
  return WriteFileAtomically(name, {{contents.data(), contents.size()}});
}

StatusOr<ConfinedDir> ConfinedDir::SubDir(const std::string& name, bool create) const {
  if (!OneComponent(name)) return Status::InvalidArgument("'" + name + "' is not a directory name");
  if (create && ::mkdirat(fd_.get(), name.c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", Join(name), errno);
  UniqueFd fd(::openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    // ELOOP (or ENOTDIR on a link to a file): a link where a directory was made or expected.
    if (err == ELOOP || err == ENOTDIR)
      return Status::FailedPrecondition(Join(name) + ": exists and is not a directory");
    return ErrnoStatus("open directory", Join(name), err);
  }
  return ConfinedDir(std::move(fd), Join(name));
}

Status ConfinedDir::Rename(const std::string& from, const std::string& to) const {
  if (!OneComponent(from) || !OneComponent(to))
    return Status::InvalidArgument("rename inside " + path_ + ": '" + from + "' -> '" + to +
                                   "' are not names");
  if (::renameat(fd_.get(), from.c_str(), fd_.get(), to.c_str()) != 0)
    return ErrnoStatus("rename '" + from + "' to '" + to + "'", path_, errno);
  return Status::Ok();
}

Status ConfinedDir::Sync() const {
  if (::fsync(fd_.get()) != 0) return ErrnoStatus("fsync directory", path_, errno);
  return Status::Ok();
}

namespace {

// OpenConfinedDir, with refusals naming `shown` (the directory, or a file in it).
StatusOr<ConfinedDir> OpenDirShown(const std::string& path, const std::string& shown,
                                   const std::string& field, bool create, const DataRoots* roots) {
  if (path.empty()) return Status::InvalidArgument(field + ": empty directory path");
  const std::string abs = Absolute(path);
  if (roots != nullptr && !roots->Confine(abs, field).ok()) return roots->Refusal(shown, field);
  const std::vector<std::string> parts = Components(abs);
  // The deepest ancestor that opens (all of it without `create`).
  size_t have = parts.size();
  UniqueFd fd;
  while (true) {
    const std::string prefix = JoinFirst(parts, have);
    fd = UniqueFd(::open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.valid()) break;
    const int err = errno;
    if (roots != nullptr && !roots->Confine(abs, field).ok()) return roots->Refusal(shown, field);
    struct stat st;
    if (err == ENOTDIR && have == parts.size() && ::stat(prefix.c_str(), &st) == 0)
      return Status::FailedPrecondition(path + ": exists and is not a directory");
    if (!create || err != ENOENT || have == 0) return ErrnoStatus("open directory", prefix, err);
    --have;
  }
  if (roots != nullptr && !VerifyOpenedUnderRoots(fd.get(), shown, field, *roots).ok())
    return roots->Refusal(shown, field);
  ConfinedDir dir(std::move(fd), JoinFirst(parts, have));
  for (size_t i = have; i < parts.size(); ++i) {
    // Confine refused ".." in the part that did not exist; it cannot be created either.
    if (parts[i] == "..")
      return Status::InvalidArgument(field + ": '" + path + "' holds '..' below what exists");
    MLCD_ASSIGN_OR_RETURN(dir, dir.SubDir(parts[i], /*create=*/true));
  }
  return dir;
}

}  // namespace

StatusOr<ConfinedDir> OpenConfinedDir(const std::string& path, const std::string& field,
                                      bool create, const DataRoots* given) {
  return OpenDirShown(path, path, field, create, RootsOr(given));
}

StatusOr<ConfinedDir> OpenConfinedParent(const std::string& path, const std::string& field,
                                         bool create, std::string* name, const DataRoots* given) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (!OneComponent(*name))
    return Status::InvalidArgument(field + ": '" + path + "' does not name a file");
  return OpenDirShown(dir, path, field, create, RootsOr(given));
}

StatusOr<std::string> ReadConfinedFile(const std::string& path, const std::string& field,
                                       const DataRoots* roots) {
  MLCD_ASSIGN_OR_RETURN(UniqueFd fd, OpenConfinedRead(path, field, roots));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", path, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status WriteConfinedFile(const std::string& path, const std::vector<ConstBuffer>& parts,
                         const std::string& field, const DataRoots* roots) {
  std::string name;
  MLCD_ASSIGN_OR_RETURN(ConfinedDir dir,
                        OpenConfinedParent(path, field, /*create=*/false, &name, roots));
  return dir.WriteFileAtomically(name, parts);
}

Status WriteConfinedFile(const std::string& path, const std::string& contents,
                         const std::string& field, const DataRoots* roots) {
  return WriteConfinedFile(path, {{contents.data(), contents.size()}}, field, roots);
}

Status MakeConfinedDirs(const std::string& path, const std::string& field, const DataRoots* roots) {
  return OpenConfinedDir(path, field, /*create=*/true, roots).status();
}

}  // namespace mlcd
