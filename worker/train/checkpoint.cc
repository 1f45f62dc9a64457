#include "worker/train/checkpoint.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>

#include "common/checkpoint_owner.h"
#include "common/clock.h"
#include "common/confined_file.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/npy.h"
#include "worker/train/checkpoint_index.h"

namespace mlcd::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kLatest = "LATEST";
constexpr const char* kMeta = "meta.json";
constexpr const char* kSpec = "spec.json";
constexpr const char* kBackboneJson = "backbone.json";
constexpr const char* kWeights = "backbone.weights.npy";
constexpr const char* kExpAvg = "backbone.exp_avg.npy";
constexpr const char* kExpAvgSq = "backbone.exp_avg_sq.npy";
constexpr const char* kRng = "rng_state.npy";

json MetaToJson(const CheckpointMeta& m) {
  return json{{"format_version", m.format_version},
              {"round", m.round},
              {"epoch", m.epoch},
              {"step_in_epoch", m.step_in_epoch},
              {"steps_per_epoch", m.steps_per_epoch},
              {"epoch_complete", m.epoch_complete},
              {"global_step", m.global_step},
              {"world_size", m.world_size},
              {"num_classes", m.num_classes},
              {"embedding_dim", m.embedding_dim},
              {"label_set", m.label_set},
              {"seed", m.seed},
              {"num_samples", m.num_samples},
              {"global_batch_size", m.global_batch_size},
              {"created_unix_ms", m.created_unix_ms}};
}

std::vector<ParamEntry> ModelEntries(VisionTransformer& model, FlatParameters* flat) {
  std::vector<ParamEntry> out;
  int64_t running = 0;
  for (const auto& item : model->named_parameters()) {
    ParamEntry e;
    e.name = item.key();
    e.shape = item.value().sizes().vec();
    e.numel = item.value().numel();
    if (flat) {
      e.offset = item.value().data_ptr<float>() - flat->values().data_ptr<float>();
    } else {
      e.offset = running;
      running += e.numel;
    }
    out.push_back(std::move(e));
  }
  return out;
}

StatusOr<std::map<std::string, ParamEntry>> ReadBackboneEntries(const std::string& dir,
                                                                int64_t* optimizer_step) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(dir + "/" + kBackboneJson));
  return ParseBackboneIndex(text, dir + "/" + kBackboneJson, optimizer_step);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Copies, for every parameter of `model`, its saved slice of `file` into `dest` at the
// parameter's offset in `mine`.
Status CopyByName(const std::string& dir, const std::string& file,
                  const std::map<std::string, ParamEntry>& saved,
                  const std::vector<ParamEntry>& mine,
                  const std::function<float*(const ParamEntry&)>& dest) {
  MLCD_ASSIGN_OR_RETURN(MappedNpy npy, MappedNpy::Open(dir + "/" + file));
  if (npy.dtype() != NpyDtype::kFloat32 || npy.header().shape.size() != 1) {
    return Status::DataLoss(npy.path() + ": expected a 1-d float32 array");
  }
  const int64_t total = npy.header().shape[0];
  const float* data = npy.data_as<float>();
  for (const auto& e : mine) {
    auto it = saved.find(e.name);
    if (it == saved.end()) {
      return Status::InvalidArgument("checkpoint " + dir + " has no backbone parameter '" + e.name +
                                     "': it was written by a different model (see its spec.json)");
    }
    if (it->second.shape != e.shape) {
      return Status::InvalidArgument(
          "backbone parameter '" + e.name + "' has shape " + ShapeText(it->second.shape) +
          " in checkpoint " + dir + " but " + ShapeText(e.shape) +
          " in this model: the spec's model sizes differ from the checkpoint's");
    }
    MLCD_RETURN_IF_ERROR(CheckParamSlice(e.name, it->second.offset, e.numel, total, npy.path()));
    std::memcpy(dest(e), data + it->second.offset, static_cast<size_t>(e.numel) * sizeof(float));
  }
  if (saved.size() != mine.size()) {
    for (const auto& saved_entry : saved) {
      // Not a structured binding: clang before 16 cannot capture one in a lambda.
      const std::string& name = saved_entry.first;
      bool found = std::any_of(mine.begin(), mine.end(),
                               [&](const ParamEntry& e) { return e.name == name; });
      if (!found) {
        return Status::InvalidArgument(
            "checkpoint " + dir + " has backbone parameter '" + name +
            "' that this model lacks: it was written by a different model");
      }
    }
  }
  return Status::Ok();
}

// AllReduce(min) of a success flag: every rank learns whether all succeeded (and it is a
// barrier).
Status AgreeOnSuccess(Collectives* comm, const Status& local, const std::string& what) {
  if (comm->world_size() <= 1) return local;
  at::Tensor flag = torch::full({1}, local.ok() ? 1 : 0,
                                torch::TensorOptions().dtype(torch::kInt).device(comm->device()));
  Status st = comm->AllReduce(flag, ReduceOp::kMin);
  if (!st.ok()) return st.WithContext(what);
  if (!local.ok()) return local.WithContext(what);
  if (flag.item<int>() == 0) return Status::Aborted(what + " failed on another rank (see its log)");
  return Status::Ok();
}

Status WriteBackbone(const std::string& dir, const CheckpointState& state) {
  std::vector<ParamEntry> entries =
      ModelEntries(const_cast<VisionTransformer&>(state.model), state.flat);
  json params = json::array();
  for (const auto& e : entries) {
    params.push_back(
        {{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}, {"numel", e.numel}});
  }
  const int64_t n = state.flat->numel();
  auto write = [&](const char* file, const torch::Tensor& t) {
    // Staged through host memory: the model and its optimizer may live on a GPU.
    torch::Tensor c = t.cpu().contiguous();
    return WriteNpy(dir + "/" + file, NpyDtype::kFloat32, {n}, c.data_ptr<float>());
  };
  MLCD_RETURN_IF_ERROR(write(kWeights, state.flat->values()));
  MLCD_RETURN_IF_ERROR(write(kExpAvg, state.optimizer->exp_avg()));
  MLCD_RETURN_IF_ERROR(write(kExpAvgSq, state.optimizer->exp_avg_sq()));
  json j{{"parameters", params},
         {"numel", n},
         {"optimizer", "adamw"},
         {"optimizer_step", state.optimizer->step_count()},
         {"model", DescribeVitOptions(state.model->options())}};
  MLCD_RETURN_IF_ERROR(WriteConfinedFile(dir + "/" + kBackboneJson, j.dump(2) + "\n"));
  // torch's default generator (unused by the training math, kept for completeness).
  auto gen = at::detail::getDefaultCPUGenerator();
  at::Tensor rng;
  {
    // torch's own std::mutex on the generator: not a capability, so clang has nothing to check.
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng = gen.get_state();
  }
  MLCD_RETURN_IF_ERROR(
      WriteNpy(dir + "/" + kRng, NpyDtype::kUint8, {rng.numel()}, rng.data_ptr<uint8_t>()));
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  auto st = google::protobuf::util::MessageToJsonString(*state.spec, &spec_json, opts);
  if (!st.ok()) return Status::Internal("cannot print the job spec as JSON: " + st.ToString());
  return WriteConfinedFile(dir + "/" + kSpec, spec_json);
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) MLCD_LOG(WARNING) << "could not remove " << path << ": " << ec.message();
}

// Rank 0's last step of WriteCheckpoint, inside the opened root: meta.json into the
// temporary directory, the old checkpoint of the same name moved aside, the rename, LATEST,
// then pruning (checkpoint_retention.h: never the coordinator's last commit nor a newer one).
Status SealCheckpoint(const ConfinedDir& root, const std::string& name, CheckpointMeta meta,
                      const CheckpointRetention& retention) {
  const std::string tmp_name = ".tmp-" + name;
  meta.created_unix_ms = NowUnixMs();
  MLCD_ASSIGN_OR_RETURN(ConfinedDir tmp, root.SubDir(tmp_name, /*create=*/false));
  MLCD_RETURN_IF_ERROR(tmp.WriteFileAtomically(kMeta, MetaToJson(meta).dump(2) + "\n"));
  std::string trash;
  struct stat st;
  if (::fstatat(root.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    // The same position written again (a re-run after a restart): move the old one aside.
    trash = ".old-" + name + "-" + std::to_string(meta.created_unix_ms);
    MLCD_RETURN_IF_ERROR(root.Rename(name, trash));
  }
  MLCD_RETURN_IF_ERROR(root.Rename(tmp_name, name));
  MLCD_RETURN_IF_ERROR(root.Sync());
  MLCD_RETURN_IF_ERROR(root.WriteFileAtomically(kLatest, name + "\n"));
  if (!trash.empty()) RemoveTree(root.PinnedPath(trash));
  PruneCheckpoints(root.PinnedPath(""), root.PinnedPath(name), retention);
  return Status::Ok();
}

}  // namespace

std::string CheckpointName(const CheckpointMeta& meta) {
  return "ckpt-r" + std::to_string(meta.round) + "-e" + std::to_string(meta.epoch) + "-s" +
         std::to_string(meta.step_in_epoch);
}

StatusOr<std::string> WriteCheckpoint(const std::string& root, const CheckpointState& state,
                                      Collectives* comm, const CheckpointRetention& retention) {
  const std::string name = CheckpointName(state.meta);
  const std::string tmp = root + "/.tmp-" + name;
  const bool leader = comm->rank() == 0;

  // 1. Rank 0 opens the root once, confined to the data roots (common/confined_file.h): the
  // claim, the temporary directory, the renames, LATEST and pruning all happen inside that
  // descriptor, so a root swapped for a link afterwards cannot redirect them. Nothing is
  // written or pruned in a root another job claimed.
  Status local;
  ConfinedDir root_dir;
  if (leader) {
    StatusOr<ConfinedDir> opened = OpenConfinedDir(root, "checkpoint_dir", /*create=*/true);
    local = opened.status();
    if (local.ok()) local = ClaimCheckpointRoot(*opened, state.job_id);
    if (local.ok()) {
      root_dir = std::move(*opened);
      RemoveTree(root_dir.PinnedPath(".tmp-" + name));  // a link there is removed, not followed
      local = root_dir.SubDir(".tmp-" + name, /*create=*/true).status();
    }
  }
  MLCD_RETURN_IF_ERROR(AgreeOnSuccess(comm, local, "preparing the checkpoint directory"));

  // 2. Every rank writes its part of the objective (its class-centre range); rank 0 also the
  // backbone. Each file is
  // written inside its directory opened and verified again (WriteNpy, WriteConfinedFile).
  local = state.objective ? state.objective->Save(tmp) : Status::Ok();
  if (local.ok() && leader) local = WriteBackbone(tmp, state);
  MLCD_RETURN_IF_ERROR(AgreeOnSuccess(comm, local, "writing checkpoint " + name));

  // 3. Rank 0 seals it: meta.json last, fsync, rename, LATEST.
  if (leader) local = SealCheckpoint(root_dir, name, state.meta, retention);
  MLCD_RETURN_IF_ERROR(AgreeOnSuccess(comm, local, "finalising the checkpoint"));
  return root + "/" + name;
}

StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("empty checkpoint path");
  if (!IsDirectory(path))
    return Status::NotFound("checkpoint " + path + " does not exist or is not a directory");
  if (PathExists(path + "/" + kMeta)) return path;
  if (PathExists(path + "/" + kLatest)) {
    MLCD_ASSIGN_OR_RETURN(std::string latest, ReadConfinedFile(path + "/" + kLatest));
    while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
    const std::string dir = path + "/" + latest;
    if (latest.empty() || !PathExists(dir + "/" + kMeta)) {
      return Status::FailedPrecondition(path + "/LATEST names '" + latest +
                                        "', which is not a complete checkpoint");
    }
    return dir;
  }
  return Status::FailedPrecondition(
      path + " is neither a checkpoint (no meta.json) nor a checkpoint root (no LATEST)");
}

StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& dir) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(dir + "/" + kMeta));
  CheckpointMeta m;
  try {
    json j = json::parse(text);
    m.format_version = static_cast<int>(JsonInt64(j.at("format_version"), "format_version"));
    if (m.format_version != kCheckpointFormatVersion) {
      return Status::FailedPrecondition(
          dir + " has checkpoint format " + std::to_string(m.format_version) +
          "; this worker reads format " + std::to_string(kCheckpointFormatVersion));
    }
    m.round = static_cast<int>(JsonInt64(j.at("round"), "round"));
    m.epoch = static_cast<int>(JsonInt64(j.at("epoch"), "epoch"));
    m.step_in_epoch = JsonInt64(j.at("step_in_epoch"), "step_in_epoch");
    m.steps_per_epoch = JsonInt64(j.at("steps_per_epoch"), "steps_per_epoch");
    m.epoch_complete = j.at("epoch_complete").get<bool>();
    m.global_step = JsonInt64(j.at("global_step"), "global_step");
    m.world_size = static_cast<int>(JsonInt64(j.at("world_size"), "world_size"));
    m.num_classes = JsonInt64(j.at("num_classes"), "num_classes");
    m.embedding_dim = JsonInt64(j.at("embedding_dim"), "embedding_dim");
    m.label_set = j.at("label_set").get<std::string>();
    const json& seed = j.at("seed");
    if (!seed.is_number_integer()) throw std::domain_error("seed is not an integer");
    m.seed = seed.get<uint64_t>();
    m.num_samples = JsonInt64(j.at("num_samples"), "num_samples");
    m.global_batch_size = JsonInt64(j.at("global_batch_size"), "global_batch_size");
    m.created_unix_ms = j.value("created_unix_ms", int64_t{0});
  } catch (const std::exception& e) {
    return Status::DataLoss(dir + "/" + kMeta + ": malformed (" + e.what() + ")");
  }
  return m;
}

StatusOr<v1::JobSpec> ReadCheckpointSpec(const std::string& dir) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadConfinedFile(dir + "/" + kSpec));
  v1::JobSpec spec;
  auto st = google::protobuf::util::JsonStringToMessage(text, &spec);
  if (!st.ok()) return Status::DataLoss(dir + "/" + kSpec + ": " + st.ToString());
  return spec;
}

Status LoadBackboneWeights(const std::string& dir, VisionTransformer& model) {
  MLCD_ASSIGN_OR_RETURN(auto saved, ReadBackboneEntries(dir, nullptr));
  std::vector<ParamEntry> mine = ModelEntries(model, nullptr);
  std::map<std::string, torch::Tensor> params;
  for (const auto& item : model->named_parameters()) params[item.key()] = item.value();
  // Stage through a CPU buffer so the model may live on any device.
  std::map<std::string, torch::Tensor> staged;
  for (const auto& e : mine) staged[e.name] = torch::empty(e.shape, torch::kFloat);
  MLCD_RETURN_IF_ERROR(CopyByName(dir, kWeights, saved, mine, [&](const ParamEntry& e) {
    return staged[e.name].data_ptr<float>();
  }));
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : staged) params[name].copy_(t);
  return Status::Ok();
}

Status LoadBackboneOptimizer(const std::string& dir, VisionTransformer& model, FlatParameters* flat,
                             BackboneAdamW* optimizer) {
  int64_t step = 0;
  MLCD_ASSIGN_OR_RETURN(auto saved, ReadBackboneEntries(dir, &step));
  std::vector<ParamEntry> mine = ModelEntries(model, flat);
  torch::Tensor m = torch::zeros({flat->numel()}, torch::kFloat);
  torch::Tensor v = torch::zeros({flat->numel()}, torch::kFloat);
  MLCD_RETURN_IF_ERROR(CopyByName(dir, kExpAvg, saved, mine, [&](const ParamEntry& e) {
    return m.data_ptr<float>() + e.offset;
  }));
  MLCD_RETURN_IF_ERROR(CopyByName(dir, kExpAvgSq, saved, mine, [&](const ParamEntry& e) {
    return v.data_ptr<float>() + e.offset;
  }));
  return optimizer->LoadState(step, m, v);
}

Status LoadRngState(const std::string& dir) {
  const std::string path = dir + "/" + kRng;
  if (!PathExists(path)) return Status::Ok();
  MLCD_ASSIGN_OR_RETURN(NpyArray arr, ReadNpy(path));
  if (arr.header.dtype != NpyDtype::kUint8) return Status::DataLoss(path + ": expected uint8");
  torch::Tensor state = torch::empty({static_cast<int64_t>(arr.bytes.size())}, torch::kUInt8);
  std::memcpy(state.data_ptr<uint8_t>(), arr.bytes.data(), arr.bytes.size());
  auto gen = at::detail::getDefaultCPUGenerator();
  try {
    std::lock_guard<std::mutex> lock(gen.mutex());  // torch's std::mutex, as in WriteBackbone
    gen.set_state(state);
  } catch (const std::exception& e) {
    return Status::DataLoss(path + ": not a CPU generator state (" + e.what() + ")");
  }
  return Status::Ok();
}

}  // namespace mlcd::worker
