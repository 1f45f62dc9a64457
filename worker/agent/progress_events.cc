#include "worker/agent/progress_events.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/limits.h"

namespace mlcd::worker {
namespace {

template <typename T>
T Get(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

// The protobuf JSON object `key` of a "finished" event, parsed into `out`.
bool ParseResult(const nlohmann::json& j, const char* key, google::protobuf::Message* out) {
  if (!j.contains(key) || !j[key].is_object()) return false;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  return google::protobuf::util::JsonStringToMessage(j[key].dump(), out, options).ok();
}

}  // namespace

bool ApplyProgressEvent(const std::string& line, v1::WorkerProgress* p, ChildOutcome* outcome,
                        bool* urgent) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) return false;
  const std::string event = j["event"].get<std::string>();
  *urgent = false;
  p->set_events(p->events() + 1);
  if (event == "started") {
    p->set_phase("running");
    p->set_steps_per_epoch(Get<int64_t>(j, "steps_per_epoch", p->steps_per_epoch()));
    p->set_job_total_steps(Get<int64_t>(j, "job_total_steps", p->job_total_steps()));
    *urgent = true;
  } else if (event == "progress") {
    const bool first = p->total_steps() == 0 && p->step() == 0;
    p->set_phase("running");
    p->set_round(Get<int32_t>(j, "round", p->round()));
    p->set_epoch(Get<int32_t>(j, "epoch", p->epoch()));
    if (j.contains("phase") && j["phase"].is_string())
      p->set_activity(j["phase"].get<std::string>());
    if (j.contains("rows_done")) {
      // embed / eval progress
      p->set_step(Get<int64_t>(j, "rows_done", p->step()));
      p->set_steps_per_epoch(Get<int64_t>(j, "rows_total", p->steps_per_epoch()));
    } else {
      p->set_step(Get<int64_t>(j, "step_in_epoch", p->step()));
      p->set_steps_per_epoch(Get<int64_t>(j, "steps_per_epoch", p->steps_per_epoch()));
      p->set_total_steps(Get<int64_t>(j, "global_step", p->total_steps()));
    }
    p->set_loss(Get<double>(j, "loss", p->loss()));
    p->set_samples_per_second(Get<double>(j, "samples_per_second", p->samples_per_second()));
    p->set_mean_positive_cosine(Get<double>(j, "mean_positive_cosine", p->mean_positive_cosine()));
    p->set_mean_negative_cosine(Get<double>(j, "mean_negative_cosine", p->mean_negative_cosine()));
    p->set_bad_samples(Get<int64_t>(j, "bad_samples", p->bad_samples()));
    if (j.contains("bad_sample_keys") && j["bad_sample_keys"].is_array()) {
      p->clear_bad_sample_keys();
      for (const auto& key : j["bad_sample_keys"]) {
        if (key.is_string() && p->bad_sample_keys_size() < kMaxBadSampleKeys)
          p->add_bad_sample_keys(key.get<std::string>());
      }
    }
    *urgent = first;
  } else if (event == "checkpoint") {
    p->set_checkpoint(Get<std::string>(j, "path", ""));
    p->set_checkpoint_round(Get<int32_t>(j, "round", 0));
    p->set_checkpoint_epoch(Get<int32_t>(j, "epoch", 0));
    p->set_checkpoint_step(Get<int64_t>(j, "step_in_epoch", 0));
    p->set_checkpoint_global_step(Get<int64_t>(j, "global_step", 0));
    p->set_checkpoint_epoch_complete(Get<bool>(j, "epoch_complete", false));
    p->set_total_steps(std::max(p->total_steps(), p->checkpoint_global_step()));
    *urgent = true;
  } else if (event == "budget") {
    // training.time_budget_minutes fixed the round's step count: the coordinator records it.
    p->set_round_steps(Get<int64_t>(j, "round_steps", p->round_steps()));
    p->set_measured_steps_per_second(
        Get<double>(j, "steps_per_second", p->measured_steps_per_second()));
    p->set_steps_per_epoch(Get<int64_t>(j, "steps_per_epoch", p->steps_per_epoch()));
    p->set_job_total_steps(Get<int64_t>(j, "job_total_steps", p->job_total_steps()));
    *urgent = true;
  } else if (event == "finished") {
    p->set_phase("finishing");
    p->set_total_steps(Get<int64_t>(j, "global_step", p->total_steps()));
    outcome->finished = true;
    if (j.contains("outputs") && j["outputs"].is_array()) {
      for (const auto& o : j["outputs"]) {
        if (o.is_string()) outcome->outputs.push_back(o.get<std::string>());
      }
    }
    outcome->has_evaluation = ParseResult(j, "evaluation", &outcome->evaluation);
    outcome->has_cluster = ParseResult(j, "cluster", &outcome->cluster);
    outcome->has_assign = ParseResult(j, "assign", &outcome->assign);
    *urgent = true;
  } else if (event == "stopped") {
    outcome->stopped = true;
    outcome->stopped_reason = Get<std::string>(j, "reason", "stop requested");
    p->set_phase("stopping");
    *urgent = true;
  } else if (event == "error") {
    outcome->error_message = Get<std::string>(j, "message", "error event without a message");
    *urgent = true;
  }
  return true;
}

}  // namespace mlcd::worker
