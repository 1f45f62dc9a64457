// Indexing an image folder (format "image-folder", docs/data.md): `root/<class>/<file>`
// (torchvision's ImageFolder: the classes are the sorted names of root's subdirectories,
// class i the i-th; a class's images may lie in nested folders below it) or a flat folder
// of images (no classes). Images are the files ending in .jpg, .jpeg, .png or .webp, any
// case; other files are skipped and counted. Samples are in sorted path order (byte order
// of the path relative to root), so the same folder always gives the same sample ids.
// A sample's key is its path relative to root ("cat/0001.jpg").
#pragma once

#include <string>

#include "common/data_roots.h"
#include "common/dataset/dataset_index.h"
#include "common/status.h"

namespace mlcd {

// True when `name` ends in one of the image extensions above (any case).
bool HasImageExtension(const std::string& name);

// NOT_FOUND when root is missing, FAILED_PRECONDITION when it is not a readable directory,
// INVALID_ARGUMENT when it holds no image or mixes images directly in root with class
// folders (name the first such file). With `roots`, a symbolic link among its files or class
// folders must resolve under them (PERMISSION_DENIED otherwise; common/data_roots.h).
StatusOr<DatasetIndex> BuildImageFolderIndex(const std::string& root,
                                             const DataRoots* roots = nullptr);

}  // namespace mlcd
