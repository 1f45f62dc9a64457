// Helpers shared by the `mlcd-worker train`, `embed` and `eval` command files: progress events
// as JSON lines, the --log-level and --max-decode-memory-mb flags, reading an assignment file.
// Header-only; no torch.
#pragma once

#include <google/protobuf/util/json_util.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <string>

#include "common/file_util.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/status.h"
#include "mlcd/v1/coordinator.pb.h"
#include "worker/data/decode_budget.h"

namespace mlcd::worker::cli {

// Progress events, one JSON object per line, to a file (appended) or stdout ('-').
class JsonLines {
 public:
  Status Open(const std::string& path) {
    if (path.empty()) return Status::Ok();
    if (path == "-") {
      out_ = &std::cout;
      return Status::Ok();
    }
    file_.open(path, std::ios::app);
    if (!file_)
      return Status::InvalidArgument("cannot open --progress-jsonl file " + path +
                                     " for appending");
    out_ = &file_;
    return Status::Ok();
  }
  void Write(const nlohmann::json& event) {
    if (!out_) return;
    MutexLock lock(&mu_);
    (*out_) << event.dump() << "\n";
    out_->flush();
  }
  bool to_stdout() const { return out_ == &std::cout; }

  // A command's end on error: logs `st`, writes the `error` event, returns exit status 1.
  int Fail(const Status& st) {
    MLCD_LOG(ERROR) << st.ToString();
    Write({{"event", "error"}, {"message", st.ToString()}});
    return 1;
  }

 private:
  // Serialises Write's lines; out_ and file_ are set once by Open before any Write.
  Mutex mu_;
  std::ostream* out_ = nullptr;
  std::ofstream file_;
};

// Applies a --log-level value (debug, info, warning, error). False, after saying why on stderr,
// when it is not one of them (the command then exits 2, a usage error).
inline bool ApplyLogLevelFlag(const std::string& value) {
  LogLevel level;
  if (!ParseLogLevel(value, &level)) {
    std::cerr << "--log-level must be debug, info, warning or error\n";
    return false;
  }
  SetLogLevel(level);
  return true;
}

// The --progress-jsonl and --log-level flags, spelled the same in every command.
inline void AddProgressJsonlFlag(CLI::App* cmd, std::string* path) {
  cmd->add_option(
      "--progress-jsonl", *path,
      "write progress events as JSON lines to this file ('-' = stdout; logs go to stderr)");
}
inline void AddLogLevelFlag(CLI::App* cmd, std::string* level) {
  cmd->add_option("--log-level", *level, "debug | info | warning | error")->capture_default_str();
}

// --max-decode-memory-mb (MLCD_MAX_DECODE_MEMORY_MB), spelled the same on the agent and its
// children: the worker's ceiling on dataset.decode_memory_mb (worker/data/decode_budget.h),
// which no spec raises. `set` gets the value when the flag is given: the agent keeps it to pass
// on to every child; a child installs it with SetDecodeMemoryCeilingMb.
inline void AddMaxDecodeMemoryFlag(CLI::App* cmd, std::function<void(const int&)> set) {
  cmd->add_option_function<int>(
         "--max-decode-memory-mb", std::move(set),
         "the most decode memory (MiB) the loader threads of a child share, whatever the spec's\n"
         "dataset.decode_memory_mb asks (default " +
             std::to_string(kDefaultMaxDecodeMemoryMb) + "; also at most 1/" +
             std::to_string(kDecodeMemoryHostShareDivisor) +
             " of the host's available memory); the agent passes it to every child")
      ->envname("MLCD_MAX_DECODE_MEMORY_MB")
      ->check(CLI::Range(kDecodeMemoryPerLoaderThreadMb, kMaxDecodeMemoryMb));
}

// The flag of a command that opens image datasets (train, embed, eval): it sets the process's
// ceiling before anything is opened.
inline void AddChildMaxDecodeMemoryFlag(CLI::App* cmd) {
  AddMaxDecodeMemoryFlag(cmd, [](const int& mb) { SetDecodeMemoryCeilingMb(mb); });
}

// Reads protobuf JSON of mlcd.v1.Assignment.
inline StatusOr<v1::Assignment> ReadAssignment(const std::string& path) {
  MLCD_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  v1::Assignment a;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto st = google::protobuf::util::JsonStringToMessage(text, &a, options);
  if (!st.ok())
    return Status::InvalidArgument(path +
                                   ": not protobuf JSON of mlcd.v1.Assignment: " + st.ToString());
  return a;
}

// Protobuf message as a JSON object (proto field names, zero values included).
inline nlohmann::json MessageToJsonObject(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &text, o);
  return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace mlcd::worker::cli
