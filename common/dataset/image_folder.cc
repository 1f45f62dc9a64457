#include "common/dataset/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "common/format.h"

namespace mlcd {
namespace {

namespace fs = std::filesystem;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Every regular file below `dir` (recursively, not following links into directories), as
// paths relative to `root`, sorted. With `roots`, each link is checked before it is followed.
Status ListFiles(const fs::path& root, const fs::path& dir, const DataRoots* roots,
                 std::vector<std::string>* out) {
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (roots) MLCD_RETURN_IF_ERROR(roots->CheckListedEntry(it->path().string(), "dataset"));
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) out->push_back(fs::relative(it->path(), root).string());
  }
  if (ec) {
    return Status::FailedPrecondition("cannot list '" + dir.string() + "': " + ec.message());
  }
  std::sort(out->begin(), out->end());
  return Status::Ok();
}

}  // namespace

bool HasImageExtension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string ext = Lower(name.substr(dot + 1));
  return ext == "jpg" || ext == "jpeg" || ext == "png" || ext == "webp";
}

StatusOr<DatasetIndex> BuildImageFolderIndex(const std::string& root_arg, const DataRoots* roots) {
  std::error_code ec;
  const fs::path root = fs::absolute(root_arg, ec);
  if (!fs::exists(root, ec)) {
    return Status::NotFound("image folder '" + root_arg + "' does not exist");
  }
  if (!fs::is_directory(root, ec)) {
    return Status::FailedPrecondition("image folder '" + root_arg + "' is not a directory");
  }
  DatasetIndex index;
  index.format = DatasetFormat::kImageFolder;
  index.paths = {root_arg};
  // Class folders: the sorted subdirectories of root (torchvision's ImageFolder).
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (roots) MLCD_RETURN_IF_ERROR(roots->CheckListedEntry(it->path().string(), "dataset"));
    std::error_code type_ec;
    if (it->is_directory(type_ec)) index.classes.push_back(it->path().filename().string());
  }
  if (ec) return Status::FailedPrecondition("cannot list '" + root_arg + "': " + ec.message());
  std::sort(index.classes.begin(), index.classes.end());
  std::vector<std::string> files;
  MLCD_RETURN_IF_ERROR(ListFiles(root, root, roots, &files));
  for (const std::string& rel : files) {
    if (!HasImageExtension(rel)) {
      ++index.skipped;
      continue;
    }
    MLCD_RETURN_IF_ERROR(CheckSampleKey(rel, "image folder '" + EscapeControlChars(root_arg) +
                                                 "' file '" + EscapeControlChars(rel) + "'"));
    const size_t slash = rel.find('/');
    int32_t class_id = -1;
    if (!index.classes.empty()) {
      if (slash == std::string::npos) {
        return Status::InvalidArgument(
            "image folder '" + root_arg + "' has class folders and also the image '" + rel +
            "' directly in it; move it into a class folder (root/<class>/<file>) or use a flat "
            "folder without subfolders");
      }
      const std::string cls = rel.substr(0, slash);
      class_id =
          static_cast<int32_t>(std::lower_bound(index.classes.begin(), index.classes.end(), cls) -
                               index.classes.begin());
    }
    MLCD_ASSIGN_OR_RETURN(IndexedFile file, StatIndexedFile((root / rel).string()));
    if (file.size > kMaxSampleBytes) {
      return Status::InvalidArgument("'" + file.path + "' is " + std::to_string(file.size) +
                                     " bytes; images are limited to " +
                                     std::to_string(kMaxSampleBytes) + " bytes");
    }
    IndexedSample s;
    s.file = static_cast<uint32_t>(index.files.size());
    s.offset = 0;
    s.size = file.size;
    s.class_id = class_id;
    index.samples.push_back(s);
    index.keys.push_back(rel);
    index.files.push_back(std::move(file));
  }
  if (index.samples.empty()) {
    return Status::InvalidArgument("image folder '" + root_arg +
                                   "' holds no image (.jpg, .jpeg, .png or .webp files)");
  }
  return index;
}

}  // namespace mlcd
