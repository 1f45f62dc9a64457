#include "worker/train/checkpoint_index.h"

#include <nlohmann/json.hpp>

namespace mlcd::worker {

StatusOr<std::map<std::string, ParamEntry>> ParseBackboneIndex(const std::string& text,
                                                               const std::string& where,
                                                               int64_t* optimizer_step) {
  std::map<std::string, ParamEntry> entries;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& p : j.at("parameters")) {
      ParamEntry e;
      e.name = p.at("name").get<std::string>();
      e.shape = p.at("shape").get<std::vector<int64_t>>();
      e.offset = p.at("offset").get<int64_t>();
      e.numel = p.at("numel").get<int64_t>();
      entries[e.name] = e;
    }
    if (optimizer_step) *optimizer_step = j.at("optimizer_step").get<int64_t>();
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
