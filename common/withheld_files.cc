#include "common/withheld_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

namespace mlcd {
namespace {

// LANDLOCK_ACCESS_FS_REFER is ABI 2; spelled out for headers older than the running kernel.
constexpr __u64 kRefer = 1ULL << 13;
constexpr __u64 kHandled = LANDLOCK_ACCESS_FS_READ_FILE | kRefer;

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// Every folder from / down to (not including) `path`.
void AddAncestors(const std::string& path, std::set<std::string>* ancestors) {
  ancestors->insert("/");
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1))
    ancestors->insert(path.substr(0, slash));
}

// Allows reading beneath every entry of `dir` that is neither withheld nor on the way to a
// withheld path; descends into those on the way.
void AllowAround(int ruleset, const std::string& dir, const std::set<std::string>& withheld,
                 const std::set<std::string>& ancestors, int* rules) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = Join(dir, name);
    if (withheld.count(path)) continue;
    if (ancestors.count(path)) {
      AllowAround(ruleset, path, withheld, ancestors, rules);
      continue;
    }
    const int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    // A symbolic link is reached through its target, which has a rule of its own.
    if (::fstat(fd, &st) == 0 && !S_ISLNK(st.st_mode)) {
      landlock_path_beneath_attr rule{};
      rule.parent_fd = fd;
      rule.allowed_access = S_ISDIR(st.st_mode) ? kHandled : LANDLOCK_ACCESS_FS_READ_FILE;
      if (::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) == 0)
        ++*rules;
    }
    ::close(fd);
  }
  ::closedir(d);
}

}  // namespace

int LandlockAbi() {
  const long abi =
      ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi > 0 ? static_cast<int>(abi) : 0;
}

StatusOr<WithheldFiles> WithheldFiles::Build(const std::vector<std::string>& paths) {
  const int abi = LandlockAbi();
  if (abi < kWithheldFilesMinLandlockAbi) {
    return Status::Unavailable(
        "this kernel offers Landlock ABI " + std::to_string(abi) +
        ", and withholding files "
        "from a child needs " +
        std::to_string(kWithheldFilesMinLandlockAbi) +
        " (Linux 5.19 or later with Landlock enabled, not blocked by a seccomp profile)");
  }
  std::set<std::string> withheld, ancestors;
  for (const std::string& p : paths) {
    if (p.empty()) continue;
    if (p[0] != '/') return Status::InvalidArgument("withheld path '" + p + "' is not absolute");
    char resolved[PATH_MAX];
    if (::realpath(p.c_str(), resolved) == nullptr) continue;
    withheld.insert(resolved);
    AddAncestors(resolved, &ancestors);
  }
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = kHandled;
  const int fd = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0));
  if (fd < 0)
    return Status::Internal(std::string("landlock_create_ruleset: ") + std::strerror(errno));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  int rules = 0;
  if (!withheld.empty()) {
    AllowAround(fd, "/", withheld, ancestors, &rules);
  } else {
    // Nothing withheld: one rule for everything.
    const int root = ::open("/", O_PATH | O_CLOEXEC);
    landlock_path_beneath_attr rule{};
    rule.parent_fd = root;
    rule.allowed_access = kHandled;
    if (root >= 0 &&
        ::syscall(SYS_landlock_add_rule, fd, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) == 0)
      ++rules;
    if (root >= 0) ::close(root);
  }
  return WithheldFiles(fd, std::vector<std::string>(withheld.begin(), withheld.end()), rules);
}

WithheldFiles::WithheldFiles(WithheldFiles&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), paths_(std::move(other.paths_)), rules_(other.rules_) {}

WithheldFiles& WithheldFiles::operator=(WithheldFiles&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    paths_ = std::move(other.paths_);
    rules_ = other.rules_;
  }
  return *this;
}

WithheldFiles::~WithheldFiles() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace mlcd
