#include "common/data_roots.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>

#include "common/file_util.h"
#include "common/limits.h"

namespace mlcd {
namespace {

// realpath(3) of `path`, or "" when any component is missing or unreadable.
std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

// The resolved form of an absolute path: realpath of the longest existing prefix plus the
// remaining components ("." dropped); "" when the remainder holds "..".
std::string ResolveAbsolute(const std::string& path) {
  std::vector<std::string> tail;
  std::string prefix = path;
  while (true) {
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    std::string real = RealPath(prefix);
    struct stat st;
    // A dangling link: where it leads is unknown, so it is outside (a link to a missing file
    // outside and one to an existing file outside must read alike).
    if (real.empty() && ::lstat(prefix.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) return "";
    if (!real.empty()) {
      for (auto it = tail.rbegin(); it != tail.rend(); ++it) {
        if (*it == "..") return "";
        if (*it == "." || it->empty()) continue;
        real += (real == "/" ? "" : "/") + *it;
      }
      return real;
    }
    const size_t slash = prefix.rfind('/');
    if (slash == std::string::npos || prefix == "/") return "";
    tail.push_back(prefix.substr(slash + 1));
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
}

}  // namespace

StatusOr<DataRoots> DataRoots::Make(const std::vector<std::string>& roots,
                                    const std::vector<std::string>& private_dirs) {
  DataRoots out;
  for (const std::string& dir : private_dirs) {
    if (dir.empty() || dir.find('\0') != std::string::npos) {
      return Status::InvalidArgument("--private-dir '" + dir + "' is not a usable path");
    }
    std::error_code ec;
    const std::string absolute = std::filesystem::absolute(dir, ec).lexically_normal().string();
    std::string real = ec ? "" : ResolveAbsolute(absolute);
    while (real.size() > 1 && real.back() == '/') real.pop_back();
    if (real.empty()) {
      return Status::InvalidArgument("--private-dir '" + dir +
                                     "': cannot resolve it (a dangling link or '..')");
    }
    if (std::find(out.private_.begin(), out.private_.end(), real) == out.private_.end())
      out.private_.push_back(real);
  }
  for (const std::string& root : roots) {
    if (root.empty() || root.find('\0') != std::string::npos || !IsDirectory(root)) {
      return Status::InvalidArgument("--data-root '" + root +
                                     "' is not an existing directory; create it or drop the flag");
    }
    const std::string real = RealPath(root);
    if (real.empty())
      return Status::InvalidArgument("--data-root '" + root + "': cannot resolve it");
    if (std::find(out.roots_.begin(), out.roots_.end(), real) == out.roots_.end())
      out.roots_.push_back(real);
  }
  return out;
}

StatusOr<DataRoots> DataRoots::FromFlags(const std::vector<std::string>& given,
                                         const std::string& data_dir,
                                         const std::vector<std::string>& private_dirs) {
  if (!given.empty()) return Make(given, private_dirs);
  std::vector<std::string> roots = {data_dir.empty() ? "." : data_dir};
  if (IsDirectory(kSharedDatasetsDir)) roots.push_back(kSharedDatasetsDir);
  return Make(roots, private_dirs);
}

std::vector<std::string> OwnStateDirs(const std::string& data_dir,
                                      const std::vector<std::string>& state_subdirs) {
  if (data_dir.empty()) return {};
  std::vector<std::string> dirs = {data_dir + "/tls-private"};
  for (const auto& sub : state_subdirs) dirs.push_back(data_dir + "/" + sub);
  return dirs;
}

std::string DataRoots::Describe() const {
  if (roots_.empty()) return "none";
  std::string s;
  for (const auto& r : roots_) s += (s.empty() ? "" : ", ") + r;
  std::string p;
  for (const auto& r : private_) p += (p.empty() ? "" : ", ") + r;
  return p.empty() ? s : s + "; private, never read or written: " + p;
}

StatusOr<std::string> DataRoots::Confine(const std::string& path, const std::string& field) const {
  if (path.empty()) return Status::InvalidArgument(field + ": empty path");
  if (path.size() > kMaxPathLength) {
    return Status::InvalidArgument(field + ": path longer than " + std::to_string(kMaxPathLength) +
                                   " bytes");
  }
  if (path.find('\0') != std::string::npos)
    return Status::InvalidArgument(field + ": the path holds a NUL byte");
  if (path[0] != '/')
    return Status::InvalidArgument(field + ": '" + path + "' must be an absolute path");
  const std::string resolved = ResolveAbsolute(path);
  if (!resolved.empty() && Holds(resolved)) return resolved;
  return Refusal(path, field);
}

bool DataRoots::Holds(const std::string& resolved) const {
  // The deepest root holding the path; a private folder as deep or deeper that also holds it
  // (it then lies inside that root, or is that root) wins.
  size_t deepest = 0;
  bool held = false;
  for (const auto& root : roots_) {
    if (PathIsUnder(resolved, root)) {
      held = true;
      deepest = std::max(deepest, root.size());
    }
  }
  if (!held) return false;
  for (const auto& dir : private_) {
    if (dir.size() >= deepest && PathIsUnder(resolved, dir)) return false;
  }
  return true;
}

Status DataRoots::Refusal(const std::string& path, const std::string& field) const {
  return Status(StatusCode::kPermissionDenied,
                field + ": '" + path + "' is not under a data root of this service (--data-root: " +
                    Describe() + "); paths are refused there whether or not they exist");
}

Status DataRoots::CheckListedEntry(const std::string& path, const std::string& field) const {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return Status::Ok();
  const std::string resolved = RealPath(path);
  if (!resolved.empty() && Holds(resolved)) return Status::Ok();
  return Refusal(path, field);
}

bool PathIsUnder(const std::string& resolved, const std::string& dir) {
  if (dir == "/") return true;
  return resolved == dir ||
         (resolved.size() > dir.size() && resolved.compare(0, dir.size(), dir) == 0 &&
          resolved[dir.size()] == '/');
}

void AddDataRootFlag(CLI::App& app, std::vector<std::string>* roots,
                     const std::string& default_text) {
  app.add_option("--data-root", *roots,
                 "Directory under which every path a request or job spec names must resolve "
                 "(after symlinks); repeatable. Default: " +
                     default_text + ". docs/hardening.md")
      ->take_all()
      ->allow_extra_args(false);
}

void AddPrivateDirFlag(CLI::App& app, std::vector<std::string>* dirs) {
  app.add_option("--private-dir", *dirs,
                 "Directory that no request may read or write even under a --data-root: other "
                 "services' state beside the data (databases, TLS material, tokens); a root "
                 "deeper inside it is open again. Repeatable. The service's own state under "
                 "its --data-dir is always private. docs/hardening.md")
      ->take_all()
      ->allow_extra_args(false);
}

}  // namespace mlcd
