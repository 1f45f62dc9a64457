#include "worker/train/checkpoint_index.h"

#include <cstdint>
#include <stdexcept>

namespace mlcd::worker {

int64_t JsonInt64(const nlohmann::json& value, const char* field) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX))
      throw std::domain_error(std::string(field) + " is beyond 2^63 - 1");
    return static_cast<int64_t>(u);
  }
  if (!value.is_number_integer())
    throw std::domain_error(std::string(field) + " is not an integer");
  return value.get<int64_t>();
}

StatusOr<std::map<std::string, ParamEntry>> ParseBackboneIndex(const std::string& text,
                                                               const std::string& where,
                                                               int64_t* optimizer_step) {
  std::map<std::string, ParamEntry> entries;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& p : j.at("parameters")) {
      ParamEntry e;
      e.name = p.at("name").get<std::string>();
      for (const auto& d : p.at("shape")) e.shape.push_back(JsonInt64(d, "shape"));
      e.offset = JsonInt64(p.at("offset"), "offset");
      e.numel = JsonInt64(p.at("numel"), "numel");
      entries[e.name] = e;
    }
    if (optimizer_step) *optimizer_step = JsonInt64(j.at("optimizer_step"), "optimizer_step");
  } catch (const std::exception& e) {
    return Status::DataLoss(where + ": malformed (" + e.what() + ")");
  }
  return entries;
}

Status CheckParamSlice(const std::string& name, int64_t offset, int64_t numel, int64_t total,
                       const std::string& where) {
  if (offset < 0 || numel < 0 || total < 0 || numel > total || offset > total - numel)
    return Status::DataLoss(where + ": parameter '" + name + "' lies outside the array");
  return Status::Ok();
}

}  // namespace mlcd::worker
