// libFuzzer target: dataset annotations (common/dataset/annotation_files.h) -- annotations.json,
// annotations.bin and the WebDataset members `<key>.labels` / `<key>.<attr>.cls`, all of which
// come from the user's shards. The input is split at NUL bytes: part 0 is annotations.json,
// part 1 annotations.bin, and every later part one member, "<extension>\n<bytes>"; a part
// with an empty extension ends the current sample (the members after it are the next one's).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dataset/annotation_files.h"

namespace {

std::vector<std::string> Split(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      parts.emplace_back();
    } else {
      parts.back().push_back(static_cast<char>(data[i]));
    }
  }
  return parts;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = Split(data, size);
  auto declared = mlcd::ParseAnnotationsJson(parts[0], "fuzz annotations.json");
  if (!declared.ok()) return 0;
  (void)mlcd::AnnotationsJson(*declared);
  if (parts.size() > 1) {
    // Every sample count the bytes could describe up to a few, so the size checks are reached
    // with both the right and wrong counts.
    for (int64_t n = 0; n < 4; ++n) {
      mlcd::DatasetAnnotations values = *declared;
      if (mlcd::DecodeAnnotationValues(parts[1], n, "fuzz annotations.bin", &values).ok())
        (void)mlcd::EncodeAnnotationValues(values);
    }
  }
  mlcd::DatasetAnnotations out = *declared;
  mlcd::AnnotationMembers members(&*declared);
  for (size_t i = 2; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const size_t newline = part.find('\n');
    const std::string extension = part.substr(0, newline);
    const std::string bytes = newline == std::string::npos ? "" : part.substr(newline + 1);
    if (extension.empty()) {
      if (!members.Finish(true, "fuzz sample", &out).ok()) return 0;
      continue;
    }
    if (!members.Wants(extension)) continue;
    if (static_cast<int64_t>(bytes.size()) > members.MaxBytes(extension)) continue;
    if (!members.Add(extension, bytes, "fuzz member").ok()) return 0;
  }
  if (members.Finish(true, "fuzz sample", &out).ok()) (void)mlcd::EncodeAnnotationValues(out);
  return 0;
}
