// The backbone index of a checkpoint (backbone.json): each parameter's name, shape and slice
// [offset, offset + numel) of the flat weight / optimizer arrays. Torch-free, so the parsing of
// what a checkpoint file claims can be fuzzed on its own (tests/fuzz/).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace mlcd::worker {

// `value` as an integer in [INT64_MIN, INT64_MAX]; throws std::domain_error naming `field` for a
// float, a string or an unsigned value beyond INT64_MAX (nlohmann's get<int64_t> converts a
// float out of range with undefined behaviour: found by fuzz_checkpoint_index).
int64_t JsonInt64(const nlohmann::json& value, const char* field);

struct ParamEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
};

// Parses backbone.json's text (`where` names it in errors): DATA_LOSS when it is not JSON,
// lacks a field or holds a value of the wrong type. `optimizer_step`, when given, receives
// its "optimizer_step".
StatusOr<std::map<std::string, ParamEntry>> ParseBackboneIndex(const std::string& text,
                                                               const std::string& where,
                                                               int64_t* optimizer_step);

// DATA_LOSS unless the slice [offset, offset + numel) lies in an array of `total` values,
// checked without computing offset + numel (a crafted offset near INT64_MAX overflows it).
Status CheckParamSlice(const std::string& name, int64_t offset, int64_t numel, int64_t total,
                       const std::string& where);

}  // namespace mlcd::worker
