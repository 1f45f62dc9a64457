#include "worker/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "common/file_util.h"

namespace mlcd::worker {
namespace {

using nlohmann::json;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian data; this writer copies memory as is");

// The data of a tensor starts at a multiple of this (the header is padded to it).
constexpr size_t kDataAlignment = 8;
// A header larger than this is refused when reading (the reference reader's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsTensor*> order;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      return Status::InvalidArgument("safetensors: bad tensor name \"" + t.name + "\"");
    if (!names.insert(t.name).second)
      return Status::InvalidArgument("safetensors: tensor \"" + t.name + "\" given twice");
    if (!t.data)
      return Status::InvalidArgument("safetensors: tensor \"" + t.name + "\" has no data");
    for (int64_t d : t.shape) {
      if (d < 0)
        return Status::InvalidArgument("safetensors: tensor \"" + t.name +
                                       "\" has a negative dimension");
    }
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    return a->name < b->name;
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<ConstBuffer> parts(1);
  size_t offset = 0;
  for (const SafetensorsTensor* t : order) {
    const size_t bytes = static_cast<size_t>(Elements(t->shape)) * sizeof(float);
    header[t->name] = {
        {"dtype", "F32"}, {"shape", t->shape}, {"data_offsets", {offset, offset + bytes}}};
    parts.push_back({t->data, bytes});
    offset += bytes;
  }
  std::string text = header.dump();
  const size_t padded = (8 + text.size() + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
  text.append(padded - 8 - text.size(), ' ');
  std::string prefix(8, '\0');
  uint64_t size = text.size();
  std::memcpy(prefix.data(), &size, 8);
  prefix += text;
  parts[0] = {prefix.data(), prefix.size()};
  return WriteFileAtomically(path, parts);
}

StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  StatusOr<std::string> read = ReadFileToString(path);
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  auto loss = [&path](const std::string& what) {
    return Status::DataLoss(path + ": not a valid safetensors file: " + what);
  };
  if (bytes.size() < 8) return loss("shorter than the 8-byte header size");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8)
    return loss("header size " + std::to_string(n) + " exceeds the file (" +
                std::to_string(bytes.size()) + " bytes)");
  json header =
      json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n), nullptr, false);
  if (!header.is_object()) return loss("the header is not a JSON object");
  const size_t data_begin = 8 + n, data_size = bytes.size() - data_begin;
  SafetensorsFile out;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return loss("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return loss("__metadata__." + k + " is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      return loss("tensor \"" + name + "\" lacks dtype, shape or data_offsets");
    if (entry["dtype"] != "F32")
      return Status::InvalidArgument(path + ": tensor \"" + name + "\" has dtype " +
                                     entry["dtype"].dump() + "; only F32 is read");
    SafetensorsFile::Tensor t;
    size_t begin = 0, end = 0;
    try {
      t.shape = entry["shape"].get<std::vector<int64_t>>();
      begin = entry["data_offsets"].at(0).get<size_t>();
      end = entry["data_offsets"].at(1).get<size_t>();
    } catch (const json::exception& e) {
      return loss("tensor \"" + name + "\": " + e.what());
    }
    const int64_t elements = Elements(t.shape);
    if (begin > end || end > data_size ||
        end - begin != static_cast<size_t>(elements) * sizeof(float))
      return loss("tensor \"" + name + "\" has data_offsets [" + std::to_string(begin) + ", " +
                  std::to_string(end) + ") that do not fit its shape or the " +
                  std::to_string(data_size) + " data bytes");
    t.values.resize(static_cast<size_t>(elements));
    if (elements > 0) std::memcpy(t.values.data(), bytes.data() + data_begin + begin, end - begin);
    ranges.emplace_back(begin, end);
    out.tensors[name] = std::move(t);
  }
  std::sort(ranges.begin(), ranges.end());
  size_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered)
      return loss("the data has a hole or an overlap at byte " + std::to_string(begin));
    covered = end;
  }
  if (covered != data_size)
    return loss(std::to_string(data_size - covered) + " data bytes belong to no tensor");
  return out;
}

}  // namespace mlcd::worker
