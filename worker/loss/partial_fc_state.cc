#include "worker/loss/partial_fc_state.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <utility>

#include "common/confined_file.h"
#include "common/enums.h"
#include "common/file_util.h"

namespace mlcd::worker {
namespace {

std::string RangeFilePrefix(const ClassRange& r) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "class_centres.%012lld-%012lld", static_cast<long long>(r.begin),
                static_cast<long long>(r.end));
  return buf;
}

// One piece's consistency against the shard it is to fill and the pieces' step so far (-1:
// none yet).
Status CheckPiece(const PartialFcShardState& p, const PartialFcShardState& shard, int64_t step) {
  const int64_t D = shard.embedding_dim;
  std::string name =
      "state piece [" + std::to_string(p.range.begin) + ", " + std::to_string(p.range.end) + ")";
  if (p.num_classes != shard.num_classes || p.embedding_dim != D) {
    return Status::InvalidArgument(name + " is for " + std::to_string(p.num_classes) +
                                   " classes of dimension " + std::to_string(p.embedding_dim) +
                                   " but this layer has " + std::to_string(shard.num_classes) +
                                   " of dimension " + std::to_string(D));
  }
  if (p.range.begin < 0 || p.range.end > p.num_classes || p.range.begin > p.range.end) {
    return Status::InvalidArgument(name + " is not a valid class range of " +
                                   std::to_string(p.num_classes));
  }
  if (step >= 0 && p.step != step) {
    return Status::InvalidArgument("state pieces disagree on the step: " + std::to_string(step) +
                                   " vs " + std::to_string(p.step) + " (" + name +
                                   "); they come from different checkpoints");
  }
  auto check = [&](const at::Tensor& t, at::ScalarType type, std::vector<int64_t> shape,
                   const char* what, bool optional) -> Status {
    if (!t.defined() && optional) return Status::Ok();
    if (!t.defined() || t.scalar_type() != type || t.sizes().vec() != shape) {
      return Status::InvalidArgument(name + ": " + what + " must be " + c10::toString(type) +
                                     " of shape [" + std::to_string(shape[0]) +
                                     (shape.size() > 1 ? ", " + std::to_string(D) : "") +
                                     "], got " + TensorShapeString(t));
    }
    return Status::Ok();
  };
  const int64_t rows = p.range.size();
  MLCD_RETURN_IF_ERROR(check(p.weight, at::kFloat, {rows, D}, "weight", false));
  MLCD_RETURN_IF_ERROR(check(p.exp_avg, at::kFloat, {rows, D}, "exp_avg", true));
  MLCD_RETURN_IF_ERROR(check(p.exp_avg_sq, at::kFloat, {rows, D}, "exp_avg_sq", true));
  MLCD_RETURN_IF_ERROR(check(p.row_steps, at::kLong, {rows}, "row_steps", true));
  return Status::Ok();
}

// Rows [dst, dst + len) of `to` from rows [src, src + len) of `from`, or zeros when `from` is
// undefined.
void CopyRowsOrZero(const at::Tensor& from, int64_t src, const at::Tensor& to, int64_t dst,
                    int64_t len) {
  if (from.defined()) {
    to.narrow(0, dst, len).copy_(from.narrow(0, src, len));
  } else {
    to.narrow(0, dst, len).zero_();
  }
}

// The names of the class_centres.<begin>-<end>.json files of `dir`, sorted.
StatusOr<std::vector<std::string>> ListRangeDescriptions(const std::string& dir) {
  static const std::regex kMetaName(R"(class_centres\.(\d+)-(\d+)\.json)");
  std::vector<std::string> metas;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, kMetaName)) metas.push_back(name);
  }
  if (ec)
    return Status::Unavailable("cannot list checkpoint directory '" + dir + "': " + ec.message());
  if (metas.empty()) {
    return Status::NotFound("checkpoint directory '" + dir +
                            "' has no class_centres.<begin>-<end>.json files");
  }
  std::sort(metas.begin(), metas.end());
  return metas;
}

// The range, sizes and step a .json describes (no tensors).
StatusOr<PartialFcShardState> ReadRangeDescription(const std::string& path) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(path));
  nlohmann::json meta = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("num_classes") ||
      !meta.contains("embedding_dim") || !meta.contains("step") || !meta.contains("begin") ||
      !meta.contains("end")) {
    return Status::DataLoss(path + " is not a valid class-centre shard description");
  }
  PartialFcShardState p;
  p.num_classes = meta["num_classes"].get<int64_t>();
  p.embedding_dim = meta["embedding_dim"].get<int64_t>();
  p.step = meta["step"].get<int64_t>();
  p.range = {meta["begin"].get<int64_t>(), meta["end"].get<int64_t>()};
  return p;
}

// Maps the four .npy files of piece `p` (described, not yet loaded) from `prefix`.
Status MapPieceFiles(const std::string& prefix, PartialFcShardState* p,
                     std::vector<MappedNpy>* maps) {
  auto open = [&](const char* suffix, NpyDtype dtype, at::ScalarType type,
                  bool two_d) -> StatusOr<at::Tensor> {
    MLCD_ASSIGN_OR_RETURN(MappedNpy map, MappedNpy::Open(prefix + suffix));
    const NpyHeader& h = map.header();
    std::vector<int64_t> want = two_d ? std::vector<int64_t>{p->range.size(), p->embedding_dim}
                                      : std::vector<int64_t>{p->range.size()};
    if (h.dtype != dtype || h.shape != want) {
      return Status::DataLoss(map.path() +
                              " does not have the dtype and shape its .json describes");
    }
    at::Tensor t = at::from_blob(const_cast<void*>(map.data()), want, type);
    maps->push_back(std::move(map));
    return t;
  };
  MLCD_ASSIGN_OR_RETURN(p->weight, open(".weight.npy", NpyDtype::kFloat32, at::kFloat, true));
  MLCD_ASSIGN_OR_RETURN(p->exp_avg, open(".exp_avg.npy", NpyDtype::kFloat32, at::kFloat, true));
  MLCD_ASSIGN_OR_RETURN(p->exp_avg_sq,
                        open(".exp_avg_sq.npy", NpyDtype::kFloat32, at::kFloat, true));
  MLCD_ASSIGN_OR_RETURN(p->row_steps, open(".row_steps.npy", NpyDtype::kInt64, at::kLong, false));
  return Status::Ok();
}

}  // namespace

std::string TensorShapeString(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

Status AssembleShardState(const std::vector<PartialFcShardState>& pieces,
                          PartialFcShardState* shard) {
  const ClassRange mine = shard->range;
  std::vector<std::pair<int64_t, int64_t>> covered;
  int64_t step = -1;
  for (const PartialFcShardState& p : pieces) {
    MLCD_RETURN_IF_ERROR(CheckPiece(p, *shard, step));
    step = p.step;
    int64_t b = std::max(p.range.begin, mine.begin), e = std::min(p.range.end, mine.end);
    if (b < e) covered.emplace_back(b, e);
  }
  std::sort(covered.begin(), covered.end());
  int64_t reach = mine.begin;
  for (const auto& iv : covered) {
    if (iv.first > reach) break;
    reach = std::max(reach, iv.second);
  }
  if (reach < mine.end) {
    return Status::InvalidArgument(
        "the state pieces do not cover this shard's classes [" + std::to_string(mine.begin) + ", " +
        std::to_string(mine.end) + "): class " + std::to_string(reach) +
        " is missing (a checkpoint written by fewer ranks than it had?)");
  }
  for (const PartialFcShardState& p : pieces) {
    int64_t b = std::max(p.range.begin, mine.begin), e = std::min(p.range.end, mine.end);
    if (b >= e) continue;
    int64_t dst = b - mine.begin, src = b - p.range.begin, len = e - b;
    shard->weight.narrow(0, dst, len).copy_(p.weight.narrow(0, src, len));
    CopyRowsOrZero(p.exp_avg, src, shard->exp_avg, dst, len);
    CopyRowsOrZero(p.exp_avg_sq, src, shard->exp_avg_sq, dst, len);
    CopyRowsOrZero(p.row_steps, src, shard->row_steps, dst, len);
  }
  if (step >= 0) shard->step = step;
  return Status::Ok();
}

Status SaveShardState(const std::string& dir, const PartialFcShardState& st,
                      const PartialFcOptions& options) {
  if (!IsDirectory(dir))
    return Status::NotFound("checkpoint directory '" + dir + "' does not exist");
  const std::string prefix = dir + "/" + RangeFilePrefix(st.range);
  const int64_t n = st.range.size(), D = st.embedding_dim;
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".weight.npy", NpyDtype::kFloat32, {n, D}, st.weight.data_ptr()));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".exp_avg.npy", NpyDtype::kFloat32, {n, D}, st.exp_avg.data_ptr()));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".exp_avg_sq.npy", NpyDtype::kFloat32, {n, D}, st.exp_avg_sq.data_ptr()));
  MLCD_RETURN_IF_ERROR(
      WriteNpy(prefix + ".row_steps.npy", NpyDtype::kInt64, {n}, st.row_steps.data_ptr()));
  nlohmann::json meta = {
      {"num_classes", st.num_classes},
      {"embedding_dim", D},
      {"step", st.step},
      {"begin", st.range.begin},
      {"end", st.range.end},
      {"variant", LossVariantName(options.variant)},
      {"margin_type", MarginTypeName(options.margin_type)},
      {"scale", options.scale},
      {"margin", options.margin},
      {"sample_ratio", options.sample_ratio},
      {"seed", options.seed},
  };
  return WriteConfinedFile(prefix + ".json", meta.dump(2) + "\n");
}

StatusOr<ShardPieces> ReadShardPieces(const std::string& dir, ClassRange range, int64_t num_classes,
                                      int64_t embedding_dim) {
  if (!IsDirectory(dir))
    return Status::NotFound("checkpoint directory '" + dir + "' does not exist");
  MLCD_ASSIGN_OR_RETURN(std::vector<std::string> metas, ListRangeDescriptions(dir));
  ShardPieces out;
  out.maps.reserve(metas.size() * 4);
  for (const std::string& name : metas) {
    const std::string path = dir + "/" + name;
    MLCD_ASSIGN_OR_RETURN(PartialFcShardState p, ReadRangeDescription(path));
    if (out.step >= 0 && p.step != out.step) {
      return Status::InvalidArgument(path + " is at step " + std::to_string(p.step) +
                                     " but other ranges are at step " + std::to_string(out.step) +
                                     "; the directory mixes checkpoints");
    }
    out.step = p.step;
    if (p.num_classes != num_classes || p.embedding_dim != embedding_dim) {
      return Status::InvalidArgument(path + " holds centres of " + std::to_string(p.num_classes) +
                                     " classes, dimension " + std::to_string(p.embedding_dim) +
                                     "; this layer has " + std::to_string(num_classes) +
                                     ", dimension " + std::to_string(embedding_dim));
    }
    if (std::max(p.range.begin, range.begin) < std::min(p.range.end, range.end)) {
      MLCD_RETURN_IF_ERROR(MapPieceFiles(dir + "/" + RangeFilePrefix(p.range), &p, &out.maps));
      out.pieces.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace mlcd::worker
