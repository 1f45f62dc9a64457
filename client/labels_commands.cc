// mlcdctl labels create|put|get|list|describe|seal|delete: label sets in mlcd-labelstore.
//
//   mlcdctl labels create --name S --k 1000 --l 8 [--scores] [--meta key=value ...]
//   mlcdctl labels put --name S --labels rows.npy [--ids ids.npy] [--scores scores.npy] [--seal]
//   mlcdctl labels get --name S --ids 0,17,4999 [--out rows.npy] [--scores-out s.npy]
//   mlcdctl labels list [--prefix job/]
//   mlcdctl labels describe --name S          (the name may also be given positionally)
//   mlcdctl labels seal --name S
//   mlcdctl labels delete --name S [--allow-missing]
//   mlcdctl labels bench --name S [--batch 1024] [--seconds 2]   (read throughput from here)
//   mlcdctl labels import --name S --k K (--jsonl F.jsonl --index DIR | --npy F.npy)
//       [--meta key=value ...]: a sealed set from per-sample label lists (client/label_import.h);
//       nothing is left behind when it fails
//
// `put` checks the whole file (labels in [0, k), l columns, finite scores, unique ids) before it
// sends anything, so a bad row halfway leaves the set unchanged.
//
// The store's address comes from --labelstore or MLCD_LABELSTORE. --output json prints one
// JSON document (numbers as numbers) instead of text. Exit codes as in `mlcdctl --help`.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>

#include "client/cli.h"
#include "client/label_import.h"
#include "client/sample_ids.h"
#include "clients/labelstore_client.h"
#include "common/format.h"
#include "common/npy.h"

namespace mlcd::cli {
namespace {

using labelstore::LabelStoreClient;
using Json = nlohmann::ordered_json;

std::unique_ptr<LabelStoreClient> MakeClient(const Context& ctx) {
  labelstore::LabelStoreClientOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(ctx.timeout_seconds * 1000));
  return std::make_unique<LabelStoreClient>(ctx.labelstore, options);
}

const char* StateName(v1::LabelSetState state) {
  switch (state) {
    case v1::LABEL_SET_STATE_OPEN:
      return "OPEN";
    case v1::LABEL_SET_STATE_SEALED:
      return "SEALED";
    default:
      return "UNSPECIFIED";
  }
}

Json InfoJson(const v1::LabelSetInfo& info) {
  Json j;
  j["name"] = info.name();
  j["state"] = StateName(info.state());
  j["num_classes"] = info.num_classes();
  j["labels_per_sample"] = info.labels_per_sample();
  j["with_scores"] = info.with_scores();
  j["num_samples"] = info.num_samples();
  j["sample_id_end"] = info.sample_id_end();
  j["size_bytes"] = info.size_bytes();
  j["created_unix_ms"] = info.created_unix_ms();
  j["sealed_unix_ms"] = info.sealed_unix_ms();
  Json meta = Json::object();
  std::map<std::string, std::string> sorted(info.metadata().begin(), info.metadata().end());
  for (const auto& [k, v] : sorted) meta[k] = v;
  j["metadata"] = meta;
  return j;
}

void PrintInfo(const Context& ctx, const v1::LabelSetInfo& info) {
  if (ctx.format() == OutputFormat::kJson) {
    std::cout << InfoJson(info).dump(2) << "\n";
    return;
  }
  std::printf("name:        %s\n", info.name().c_str());
  std::printf("state:       %s\n", StateName(info.state()));
  std::printf("k:           %d\n", info.num_classes());
  std::printf("l:           %d\n", info.labels_per_sample());
  std::printf("scores:      %s\n", info.with_scores() ? "yes" : "no");
  std::printf("samples:     %llu (ids below %llu)\n",
              static_cast<unsigned long long>(info.num_samples()),
              static_cast<unsigned long long>(info.sample_id_end()));
  std::printf("size:        %s\n", FormatBytes(info.size_bytes()).c_str());
  std::printf("created:     %s\n", FormatUtcTime(info.created_unix_ms()).c_str());
  std::printf("sealed:      %s\n", FormatUtcTime(info.sealed_unix_ms()).c_str());
  std::map<std::string, std::string> sorted(info.metadata().begin(), info.metadata().end());
  for (const auto& [k, v] : sorted) std::printf("metadata:    %s=%s\n", k.c_str(), v.c_str());
}

// ---------------------------------------------------------------------------------------

struct CreateArgs {
  std::string name;
  int64_t k = 0;
  int64_t l = 0;
  bool scores = false;
  std::vector<std::string> meta;
};

int RunCreate(const Context& ctx, const CreateArgs& args) {
  labelstore::LabelSetSpec spec;
  spec.name = args.name;
  if (args.k < 1 || args.k > std::numeric_limits<int32_t>::max()) {
    return ctx.Fail(
        Status::InvalidArgument("--k " + std::to_string(args.k) + " must be in [1, 2^31-1]"));
  }
  if (args.l < 1 || args.l > labelstore::kMaxLabelsPerSample) {
    return ctx.Fail(Status::InvalidArgument("--l " + std::to_string(args.l) + " must be in [1, " +
                                            std::to_string(labelstore::kMaxLabelsPerSample) + "]"));
  }
  spec.num_classes = static_cast<int32_t>(args.k);
  spec.labels_per_sample = static_cast<int32_t>(args.l);
  spec.with_scores = args.scores;
  if (Status meta = ParseMetaEntries(args.meta, &spec.metadata); !meta.ok()) return ctx.Fail(meta);
  auto client = MakeClient(ctx);
  auto info = client->CreateLabelSet(spec);
  if (!info.ok()) return ctx.Fail(info.status());
  PrintInfo(ctx, *info);
  return kExitOk;
}

struct PutArgs {
  std::string name;
  std::string labels_path;
  std::string ids_path;
  std::string scores_path;
  size_t batch_rows = 16384;
  bool seal = false;
};

// The rows of one `put`, loaded and checked in full before anything is sent.
struct PutRows {
  std::vector<uint64_t> ids;
  std::optional<MappedNpy> mapped;  // the labels file, used in place when it is int32
  std::vector<int32_t> converted;   // the labels converted from another integer dtype
  const int32_t* labels = nullptr;
  std::vector<float> scores;  // empty: the set has no scores
};

// Labels: n x l integers (int32 used in place; other integer dtypes converted and checked).
Status LoadPutLabels(const PutArgs& args, int32_t l, PutRows* rows) {
  MLCD_ASSIGN_OR_RETURN(MappedNpy mapped, MappedNpy::Open(args.labels_path));
  rows->mapped.emplace(std::move(mapped));
  const auto& header = rows->mapped->header();
  if (header.shape.empty() || header.shape.size() > 2) {
    return Status::InvalidArgument(args.labels_path + ": labels must be an n x l array, got " +
                                   std::to_string(header.shape.size()) + "-d");
  }
  const int64_t n = header.shape[0];
  const int64_t cols = header.shape.size() == 2 ? header.shape[1] : 1;
  if (cols != l) {
    return Status::InvalidArgument(args.labels_path + " has " + std::to_string(cols) +
                                   " columns but label set '" + args.name +
                                   "' has l = " + std::to_string(l) + " labels per sample");
  }
  if (n == 0) return Status::InvalidArgument(args.labels_path + " has no rows");
  if (header.dtype == NpyDtype::kInt32) {
    rows->labels = rows->mapped->data_as<int32_t>();
    return Status::Ok();
  }
  MLCD_ASSIGN_OR_RETURN(std::vector<int64_t> values, ReadNpyAsInt64(args.labels_path));
  rows->converted.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return Status::InvalidArgument(args.labels_path + ": label " + std::to_string(v) +
                                     " at row " + std::to_string(i / l) + " does not fit int32");
    }
    rows->converted[i] = static_cast<int32_t>(v);
  }
  rows->labels = rows->converted.data();
  return Status::Ok();
}

// Ids (0..n-1 without --ids) and scores, checked against the labels' n and the set's shape.
Status LoadPutIdsAndScores(const PutArgs& args, const v1::LabelSetInfo& info, int64_t n,
                           PutRows* rows) {
  const int32_t l = info.labels_per_sample();
  if (args.ids_path.empty()) {
    rows->ids.resize(static_cast<size_t>(n));
    std::iota(rows->ids.begin(), rows->ids.end(), 0);
  } else {
    MLCD_ASSIGN_OR_RETURN(rows->ids, ReadIdsFile(args.ids_path));
    if (static_cast<int64_t>(rows->ids.size()) != n) {
      return Status::InvalidArgument(args.ids_path + " has " + std::to_string(rows->ids.size()) +
                                     " ids but " + args.labels_path + " has " + std::to_string(n) +
                                     " rows");
    }
  }
  if (!args.scores_path.empty()) {
    std::vector<int64_t> shape;
    MLCD_ASSIGN_OR_RETURN(rows->scores, ReadNpyAsFloat32(args.scores_path, &shape));
    if (rows->scores.size() != static_cast<size_t>(n * l)) {
      return Status::InvalidArgument(
          args.scores_path + " has " + std::to_string(rows->scores.size()) +
          " values; it must be the same n x l shape as " + args.labels_path);
    }
  }
  if (info.with_scores() && rows->scores.empty()) {
    return Status::InvalidArgument(
        "label set '" + args.name +
        "' stores scores; pass them with --scores scores.npy (n x l float)");
  }
  if (!info.with_scores() && !rows->scores.empty()) {
    return Status::InvalidArgument("label set '" + args.name +
                                   "' was created without scores; drop --scores");
  }
  return Status::Ok();
}

// Every row checked before the stream opens: the store commits each message on its own, so a
// bad row that only the server saw would leave the messages before it written.
Status CheckPutRows(const PutArgs& args, const v1::LabelSetInfo& info, const PutRows& rows) {
  const labelstore::LabelSetShape shape{info.num_classes(), info.labels_per_sample(),
                                        info.with_scores()};
  Status valid =
      labelstore::ValidateLabelRows(rows.ids.data(), rows.ids.size(), rows.labels,
                                    rows.scores.empty() ? nullptr : rows.scores.data(), shape);
  if (valid.ok() && !args.ids_path.empty()) {
    std::vector<uint64_t> scratch;
    valid = labelstore::CheckUniqueIds(rows.ids.data(), rows.ids.size(), args.ids_path, &scratch);
  }
  if (valid.ok()) return valid;
  const std::string files =
      args.labels_path + (args.scores_path.empty() ? "" : " / " + args.scores_path);
  return Status::InvalidArgument(files + ": " + valid.message() + "; nothing was written to '" +
                                 args.name + "'");
}

// Streams the rows in messages of at most `batch_rows`, with a progress bar unless quiet.
StatusOr<v1::WriteLabelsResponse> StreamPutRows(LabelStoreClient* client, const PutArgs& args,
                                                int32_t l, const PutRows& rows, bool quiet,
                                                double* seconds) {
  const size_t step = std::min(args.batch_rows, labelstore::MaxRowsPerMessage(l));
  const auto& ids = rows.ids;
  std::unique_ptr<ProgressDisplay> progress;
  if (!quiet) progress = std::make_unique<ProgressDisplay>("put " + args.name);
  auto writer = client->OpenWriter(args.name);
  const auto start = std::chrono::steady_clock::now();
  const float* scores = rows.scores.empty() ? nullptr : rows.scores.data();
  for (size_t begin = 0; begin < ids.size(); begin += step) {
    const size_t count = std::min(step, ids.size() - begin);
    Status s = writer->Write(ids.data() + begin, count, rows.labels + begin * l, count * l,
                             scores ? scores + begin * l : nullptr, scores ? count * l : 0);
    if (!s.ok()) {
      if (progress) progress->Finish("failed");
      return s;
    }
    if (progress) {
      progress->Update(static_cast<double>(begin + count) / ids.size(),
                       std::to_string(begin + count) + "/" + std::to_string(ids.size()) + " rows");
    }
  }
  auto result = writer->Finish();
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) {
    if (progress) progress->Finish("failed");
    return result.status();
  }
  if (progress) {
    char detail[160];
    std::snprintf(
        detail, sizeof(detail), "%llu rows in %llu messages, %s, %.0f rows/s; set has %llu samples",
        static_cast<unsigned long long>(result->rows_written()),
        static_cast<unsigned long long>(result->messages()), FormatDuration(*seconds).c_str(),
        result->rows_written() / std::max(*seconds, 1e-9),
        static_cast<unsigned long long>(result->num_samples()));
    progress->Finish(detail);
  }
  return result;
}

int RunPut(const Context& ctx, const PutArgs& args) {
  auto client = MakeClient(ctx);
  auto info = client->Describe(args.name);
  if (!info.ok()) return ctx.Fail(info.status());
  const int32_t l = info->labels_per_sample();
  if (info->state() == v1::LABEL_SET_STATE_SEALED) {
    return ctx.Fail(Status::FailedPrecondition(
        "label set '" + args.name + "' is sealed and immutable; create a new set to write labels"));
  }
  PutRows rows;
  Status loaded = LoadPutLabels(args, l, &rows);
  if (loaded.ok()) loaded = LoadPutIdsAndScores(args, *info, rows.mapped->header().shape[0], &rows);
  if (loaded.ok()) loaded = CheckPutRows(args, *info, rows);
  if (!loaded.ok()) return ctx.Fail(loaded);

  const bool quiet = ctx.format() == OutputFormat::kJson;
  double seconds = 0;
  auto result = StreamPutRows(client.get(), args, l, rows, quiet, &seconds);
  if (!result.ok()) return ctx.Fail(result.status());
  v1::LabelSetInfo final_info;
  if (args.seal) {
    auto sealed = client->Seal(args.name);
    if (!sealed.ok()) return ctx.Fail(sealed.status());
    final_info = *sealed;
    if (!quiet) std::printf("sealed %s\n", args.name.c_str());
  }
  if (quiet) {
    Json j;
    j["name"] = args.name;
    j["rows_written"] = result->rows_written();
    j["messages"] = result->messages();
    j["num_samples"] = result->num_samples();
    j["seconds"] = seconds;
    j["rows_per_second"] = result->rows_written() / std::max(seconds, 1e-9);
    if (args.seal) j["label_set"] = InfoJson(final_info);
    std::cout << j.dump(2) << "\n";
  }
  return kExitOk;
}

struct ImportArgs {
  std::string name;
  ImportSource source;
  std::vector<std::string> meta;
};

// Creates the set, writes the rows and seals it; on a failure after the create the set is
// deleted again, so a failed import leaves no set behind (and never a sealed one).
StatusOr<v1::LabelSetInfo> WriteImport(LabelStoreClient* client, const ImportArgs& args,
                                       const ImportedLabels& rows) {
  labelstore::LabelSetSpec spec;
  spec.name = args.name;
  spec.num_classes = static_cast<int32_t>(args.source.k);
  spec.labels_per_sample = rows.l;
  spec.metadata["source"] = args.source.npy_path.empty() ? "import of " + args.source.jsonl_path
                                                         : "import of " + args.source.npy_path;
  MLCD_RETURN_IF_ERROR(ParseMetaEntries(args.meta, &spec.metadata));
  MLCD_RETURN_IF_ERROR(
      labelstore::ValidateLabelRows(rows.ids.data(), rows.ids.size(), rows.labels.data(), nullptr,
                                    {spec.num_classes, spec.labels_per_sample, false}));
  MLCD_RETURN_IF_ERROR(client->CreateLabelSet(spec).status());
  auto write = [&]() -> StatusOr<v1::LabelSetInfo> {
    const size_t step = labelstore::MaxRowsPerMessage(rows.l);
    auto writer = client->OpenWriter(args.name);
    for (size_t begin = 0; begin < rows.ids.size(); begin += step) {
      const size_t count = std::min(step, rows.ids.size() - begin);
      MLCD_RETURN_IF_ERROR(writer->Write(rows.ids.data() + begin, count,
                                         rows.labels.data() + begin * rows.l, count * rows.l,
                                         nullptr, 0));
    }
    MLCD_RETURN_IF_ERROR(writer->Finish().status());
    return client->Seal(args.name);
  };
  StatusOr<v1::LabelSetInfo> sealed = write();
  if (sealed.ok()) return sealed;
  const Status deleted = client->Delete(args.name).status();
  return Status(
      sealed.status().code(),
      sealed.status().message() +
          (deleted.ok() ? "; the partly written set was deleted"
                        : "; deleting the partly written set failed too (" + deleted.ToString() +
                              "): delete it with "
                              "mlcdctl labels delete"));
}

int RunImport(const Context& ctx, const ImportArgs& args) {
  auto rows = ReadImportSource(args.source);
  if (!rows.ok()) return ctx.Fail(rows.status());
  auto client = MakeClient(ctx);
  auto info = WriteImport(client.get(), args, *rows);
  if (!info.ok()) return ctx.Fail(info.status());
  if (ctx.format() == OutputFormat::kJson) {
    Json j = InfoJson(*info);
    j["imported"] = {{"samples", rows->ids.size()},
                     {"labels_per_sample_min", rows->min_labels},
                     {"labels_per_sample_max", rows->max_labels},
                     {"labels_per_sample_mean", rows->mean_labels}};
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf(
      "imported %zu samples into %s (sealed), %lld-%lld labels each (mean %.2f), "
      "l = %d (shorter rows repeat their first label)\n",
      rows->ids.size(), args.name.c_str(), static_cast<long long>(rows->min_labels),
      static_cast<long long>(rows->max_labels), rows->mean_labels, rows->l);
  return kExitOk;
}

struct GetArgs {
  std::string name;
  std::string ids;
  std::string ids_path;
  std::string out;
  std::string scores_out;
  bool scores = false;
};

int RunGet(const Context& ctx, const GetArgs& args) {
  if (args.ids.empty() == args.ids_path.empty()) {
    return ctx.Fail(
        Status::InvalidArgument("give exactly one of --ids 0,17,4999 and --ids-file ids.npy"));
  }
  auto ids = args.ids.empty() ? ReadIdsFile(args.ids_path) : ParseIdList(args.ids);
  if (!ids.ok()) return ctx.Fail(ids.status());
  if (ids->empty()) return ctx.Fail(Status::InvalidArgument(args.ids_path + " holds no ids"));
  const bool with_scores = args.scores || !args.scores_out.empty();
  auto client = MakeClient(ctx);
  labelstore::LabelBatch batch;
  const auto start = std::chrono::steady_clock::now();
  Status s = client->GetLabels(args.name, ids->data(), ids->size(), with_scores, &batch);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok()) return ctx.Fail(s);
  const size_t n = ids->size();
  const int32_t l = batch.labels_per_sample;

  if (!args.out.empty()) {
    s = WriteNpy(args.out, NpyDtype::kInt32, {static_cast<int64_t>(n), l}, batch.labels.data());
    if (!s.ok()) return ctx.Fail(s);
  }
  if (!args.scores_out.empty()) {
    s = WriteNpy(args.scores_out, NpyDtype::kFloat32, {static_cast<int64_t>(n), l},
                 batch.scores.data());
    if (!s.ok()) return ctx.Fail(s);
  }
  const bool print_rows = args.out.empty() && args.scores_out.empty();
  if (ctx.format() == OutputFormat::kJson) {
    Json j;
    j["name"] = args.name;
    j["labels_per_sample"] = l;
    j["num_ids"] = n;
    j["missing_ids"] = batch.missing_ids;
    j["seconds"] = seconds;
    if (print_rows) {
      Json rows = Json::array();
      size_t next_missing = 0;
      for (size_t i = 0; i < n; ++i) {
        Json row;
        row["id"] = (*ids)[i];
        if (next_missing < batch.missing_indices.size() &&
            batch.missing_indices[next_missing] == i) {
          ++next_missing;
          row["missing"] = true;
        } else {
          row["labels"] = std::vector<int32_t>(batch.row(i), batch.row(i) + l);
          if (with_scores) {
            row["scores"] = std::vector<float>(batch.scores.begin() + i * l,
                                               batch.scores.begin() + (i + 1) * l);
          }
        }
        rows.push_back(std::move(row));
      }
      j["rows"] = std::move(rows);
    } else {
      if (!args.out.empty()) j["out"] = args.out;
      if (!args.scores_out.empty()) j["scores_out"] = args.scores_out;
    }
    std::cout << j.dump(print_rows ? -1 : 2) << "\n";
    return kExitOk;
  }
  if (print_rows) {
    size_t next_missing = 0;
    std::string line;
    for (size_t i = 0; i < n; ++i) {
      line = std::to_string((*ids)[i]) + "\t";
      if (next_missing < batch.missing_indices.size() && batch.missing_indices[next_missing] == i) {
        ++next_missing;
        line += "missing";
      } else {
        for (int32_t c = 0; c < l; ++c) {
          if (c) line += ' ';
          line += std::to_string(batch.row(i)[c]);
        }
        if (with_scores) {
          line += '\t';
          char buf[32];
          for (int32_t c = 0; c < l; ++c) {
            std::snprintf(buf, sizeof(buf), c ? " %.4f" : "%.4f", batch.scores[i * l + c]);
            line += buf;
          }
        }
      }
      std::puts(line.c_str());
    }
  } else {
    std::printf("%zu rows (%zu missing) of '%s' written to %s%s%s\n", n, batch.missing_ids.size(),
                args.name.c_str(), args.out.empty() ? "" : args.out.c_str(),
                (!args.out.empty() && !args.scores_out.empty()) ? " and " : "",
                args.scores_out.c_str());
  }
  if (!batch.missing_ids.empty() && print_rows) {
    std::fprintf(stderr, "%zu of %zu ids have no row in '%s'\n", batch.missing_ids.size(), n,
                 args.name.c_str());
  }
  return kExitOk;
}

int RunList(const Context& ctx, const std::string& prefix) {
  auto client = MakeClient(ctx);
  auto sets = client->List(prefix);
  if (!sets.ok()) return ctx.Fail(sets.status());
  if (ctx.format() == OutputFormat::kJson) {
    Json j = Json::array();
    for (const auto& info : *sets) j.push_back(InfoJson(info));
    std::cout << Json{{"label_sets", j}}.dump(2) << "\n";
    return kExitOk;
  }
  if (sets->empty()) {
    std::printf("no label sets%s\n",
                prefix.empty() ? "" : (" with prefix '" + prefix + "'").c_str());
    return kExitOk;
  }
  size_t width = 4;
  for (const auto& info : *sets) width = std::max(width, info.name().size());
  std::printf("%-*s  %-6s  %10s  %5s  %12s  %10s\n", static_cast<int>(width), "NAME", "STATE", "K",
              "L", "SAMPLES", "SIZE");
  for (const auto& info : *sets) {
    std::printf("%-*s  %-6s  %10d  %5d  %12llu  %10s\n", static_cast<int>(width),
                info.name().c_str(), StateName(info.state()), info.num_classes(),
                info.labels_per_sample(), static_cast<unsigned long long>(info.num_samples()),
                FormatBytes(info.size_bytes()).c_str());
  }
  return kExitOk;
}

int RunDescribe(const Context& ctx, const std::string& name) {
  auto info = MakeClient(ctx)->Describe(name);
  if (!info.ok()) return ctx.Fail(info.status());
  PrintInfo(ctx, *info);
  return kExitOk;
}

int RunSeal(const Context& ctx, const std::string& name, bool require_open) {
  auto info = MakeClient(ctx)->Seal(name, require_open);
  if (!info.ok()) return ctx.Fail(info.status());
  PrintInfo(ctx, *info);
  return kExitOk;
}

int RunDelete(const Context& ctx, const std::string& name, bool allow_missing) {
  auto result = MakeClient(ctx)->Delete(name, allow_missing);
  if (!result.ok()) return ctx.Fail(result.status());
  if (ctx.format() == OutputFormat::kJson) {
    std::cout << Json{{"name", name},
                      {"deleted", result->deleted()},
                      {"rows_deleted", result->rows_deleted()}}
                     .dump(2)
              << "\n";
  } else if (result->deleted()) {
    std::printf("deleted %s (%llu rows)\n", name.c_str(),
                static_cast<unsigned long long>(result->rows_deleted()));
  } else {
    std::printf("%s did not exist\n", name.c_str());
  }
  return kExitOk;
}

struct BenchArgs {
  std::string name;
  size_t batch = 1024;
  double seconds = 2;
};

// Times GetLabels of random batches of the set's ids, one call at a time, as a training worker
// reads them: rows/s and latency percentiles seen from this machine.
int RunBench(const Context& ctx, const BenchArgs& args) {
  auto client = MakeClient(ctx);
  auto info = client->Describe(args.name);
  if (!info.ok()) return ctx.Fail(info.status());
  const uint64_t end = info->sample_id_end();
  if (end == 0)
    return ctx.Fail(Status::FailedPrecondition("label set '" + args.name + "' is empty"));
  std::mt19937_64 rng(7);
  std::vector<uint64_t> ids(args.batch);
  labelstore::LabelBatch batch;
  std::vector<double> latencies;
  uint64_t missing = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(args.seconds);
  auto now = start;
  while (now < deadline || latencies.size() < 10) {
    for (auto& id : ids) id = rng() % end;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = client->GetLabels(args.name, ids.data(), ids.size(), false, &batch);
    now = std::chrono::steady_clock::now();
    if (!s.ok()) return ctx.Fail(s);
    latencies.push_back(std::chrono::duration<double>(now - t0).count());
    missing += batch.missing_ids.size();
  }
  const double total = std::chrono::duration<double>(now - start).count();
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    return 1e3 *
           latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))];
  };
  const double rows_per_second = static_cast<double>(latencies.size() * args.batch) / total;
  if (ctx.format() == OutputFormat::kJson) {
    Json j;
    j["name"] = args.name;
    j["batch"] = args.batch;
    j["calls"] = latencies.size();
    j["rows_per_second"] = rows_per_second;
    j["p50_ms"] = pct(0.5);
    j["p99_ms"] = pct(0.99);
    j["max_ms"] = 1e3 * latencies.back();
    j["missing"] = missing;
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "%zu GetLabels calls of %zu random ids: %.0f rows/s, p50 %.3f ms, p99 %.3f ms, max %.3f "
        "ms, "
        "%llu ids missing\n",
        latencies.size(), args.batch, rows_per_second, pct(0.5), pct(0.99), 1e3 * latencies.back(),
        static_cast<unsigned long long>(missing));
  }
  return kExitOk;
}

// Adds the set name as `--name S` or a positional argument.
CLI::Option* AddName(CLI::App* cmd, std::string* name) {
  return cmd->add_option("name,--name", *name, "label set name, e.g. job/abc123/r0")->required();
}

static CommandRegistration registration(20, [](CLI::App& app, Context& ctx) {
  auto* labels =
      app.add_subcommand("labels",
                         "label sets in mlcd-labelstore: create, put, import, get, list, "
                         "describe, seal, delete, bench");
  labels->require_subcommand(1);

  auto create_args = std::make_shared<CreateArgs>();
  auto* create = labels->add_subcommand("create", "create an OPEN label set");
  AddName(create, &create_args->name);
  create->add_option("--k", create_args->k, "number of classes k (labels are in [0, k))")
      ->required();
  create->add_option("--l", create_args->l, "labels per sample l")->required();
  create->add_flag("--scores", create_args->scores, "rows also carry one float score per label");
  create->add_option("--meta", create_args->meta, "metadata entry key=value (repeatable)");
  create->callback([&ctx, create_args] { ctx.exit_code = RunCreate(ctx, *create_args); });

  auto put_args = std::make_shared<PutArgs>();
  auto* put = labels->add_subcommand("put", "write rows from .npy files into an OPEN set");
  AddName(put, &put_args->name);
  put->add_option("--labels", put_args->labels_path, "n x l integer .npy (int32 preferred)")
      ->required();
  put->add_option("--ids", put_args->ids_path, "n sample ids .npy (default 0..n-1)");
  put->add_option("--scores", put_args->scores_path,
                  "n x l float .npy (sets created with --scores)");
  put->add_option("--batch-rows", put_args->batch_rows, "rows per stream message")
      ->check(CLI::Range(size_t{1}, labelstore::kMaxRowsPerWriteMessage))
      ->capture_default_str();
  put->add_flag("--seal", put_args->seal, "seal the set after writing");
  put->callback([&ctx, put_args] { ctx.exit_code = RunPut(ctx, *put_args); });

  auto get_args = std::make_shared<GetArgs>();
  auto* get = labels->add_subcommand("get", "read rows by sample id (prints them unless --out)");
  AddName(get, &get_args->name);
  get->add_option("--ids", get_args->ids, "ids, e.g. 0,17,4999 or ranges 0:100 (B exclusive)");
  get->add_option("--ids-file", get_args->ids_path, "ids as a 1-d integer .npy");
  get->add_option("--out", get_args->out,
                  "write the n x l int32 rows here (.npy; -1 rows for missing ids)");
  get->add_option("--scores-out", get_args->scores_out,
                  "write the n x l float32 scores here (.npy)");
  get->add_flag("--scores", get_args->scores, "also read scores");
  get->callback([&ctx, get_args] { ctx.exit_code = RunGet(ctx, *get_args); });

  auto list_prefix = std::make_shared<std::string>();
  auto* list = labels->add_subcommand("list", "list label sets");
  list->add_option("--prefix", *list_prefix, "only names starting with this");
  list->callback([&ctx, list_prefix] { ctx.exit_code = RunList(ctx, *list_prefix); });

  auto describe_name = std::make_shared<std::string>();
  auto* describe = labels->add_subcommand("describe", "show a set's shape, state, count and size");
  AddName(describe, describe_name.get());
  describe->callback([&ctx, describe_name] { ctx.exit_code = RunDescribe(ctx, *describe_name); });

  auto seal_name = std::make_shared<std::string>();
  auto seal_require_open = std::make_shared<bool>(false);
  auto* seal = labels->add_subcommand("seal", "make a set immutable");
  AddName(seal, seal_name.get());
  seal->add_flag("--require-open", *seal_require_open,
                 "fail (exit 5) when the set is already sealed");
  seal->callback([&ctx, seal_name, seal_require_open] {
    ctx.exit_code = RunSeal(ctx, *seal_name, *seal_require_open);
  });

  auto delete_name = std::make_shared<std::string>();
  auto delete_allow_missing = std::make_shared<bool>(false);
  auto* del = labels->add_subcommand("delete", "delete a set and all its rows");
  AddName(del, delete_name.get());
  del->add_flag("--allow-missing", *delete_allow_missing, "succeed when the set does not exist");
  del->callback([&ctx, delete_name, delete_allow_missing] {
    ctx.exit_code = RunDelete(ctx, *delete_name, *delete_allow_missing);
  });

  auto import_args = std::make_shared<ImportArgs>();
  auto* import = labels->add_subcommand(
      "import",
      "make a SEALED set from per-sample label lists: JSON lines {\"key\": ..., \"labels\": "
      "[...]}\nmatched through a dataset index, or an [n, c] integer .npy by sample id (-1 = "
      "padding);\nchecked in full first, and nothing is left behind when it fails");
  AddName(import, &import_args->name);
  import->add_option("--k", import_args->source.k, "number of classes k (labels are in [0, k))")
      ->required();
  import->add_option("--jsonl", import_args->source.jsonl_path, "JSON lines of {key, labels}");
  import->add_option("--index", import_args->source.index_dir,
                     "the dataset index whose keys number the samples (with --jsonl)");
  import->add_option("--npy", import_args->source.npy_path,
                     "[n] or [n, c] integer .npy by sample id");
  import->add_option("--meta", import_args->meta, "metadata entry key=value (repeatable)");
  import->callback([&ctx, import_args] { ctx.exit_code = RunImport(ctx, *import_args);
});

auto bench_args = std::make_shared<BenchArgs>();
auto* bench = labels->add_subcommand(
    "bench", "time GetLabels of random batches from here (rows/s, p50, p99)");
AddName(bench, &bench_args->name);
bench->add_option("--batch", bench_args->batch, "ids per call")
    ->check(CLI::Range(size_t{1}, labelstore::kMaxIdsPerRead))
    ->capture_default_str();
bench->add_option("--seconds", bench_args->seconds, "how long to measure")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();
bench->callback([&ctx, bench_args] { ctx.exit_code = RunBench(ctx, *bench_args); });
});

}  // namespace
}  // namespace mlcd::cli
