#include "common/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "common/limits.h"
#include "common/yaml_proto.h"

namespace mlcd {
namespace {

constexpr const char* kApiVersion = "mlcd/v1";
constexpr const char* kKind = "TrainingJob";

}  // namespace

ParsedJob ParseJobSpecYamlLenient(const std::string& text, std::vector<SpecProblem>* problems) {
  ParsedJob job;
  if (text.size() > kMaxSpecYamlBytes) {
    problems->push_back({"", "the job spec is " + std::to_string(text.size()) +
                                 " bytes of YAML; at most " + std::to_string(kMaxSpecYamlBytes) +
                                 " are read"});
    return job;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    problems->push_back({"", "not valid YAML: line " + std::to_string(e.mark.line + 1) +
                                 ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg});
    return job;
  }
  if (!root.IsMap()) {
    problems->push_back(
        {"", "a job spec is a YAML mapping with apiVersion, kind, metadata and spec; got " +
                 YamlNodeKind(root)});
    return job;
  }
  bool saw_api = false, saw_kind = false, saw_spec = false;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    const YAML::Node value = it->second;  // a copy: it->second lives in a temporary proxy
    if (key == "apiVersion") {
      saw_api = true;
      if (!value.IsScalar() || value.Scalar() != kApiVersion) {
        problems->push_back({"apiVersion" + YamlLineOf(value),
                             (value.IsScalar() ? "'" + value.Scalar() + "'" : YamlNodeKind(value)) +
                                 " is not supported; use " + kApiVersion});
      }
    } else if (key == "kind") {
      saw_kind = true;
      if (!value.IsScalar() || value.Scalar() != kKind) {
        problems->push_back({"kind" + YamlLineOf(value),
                             (value.IsScalar() ? "'" + value.Scalar() + "'" : YamlNodeKind(value)) +
                                 " is not supported; use " + kKind});
      }
    } else if (key == "metadata") {
      YamlToMessage(value, "metadata", &job.metadata, problems);
    } else if (key == "spec") {
      saw_spec = true;
      YamlToMessage(value, "spec", &job.spec, problems);
    } else {
      problems->push_back({key + YamlLineOf(it->first),
                           UnknownFieldMessage(key, {"apiVersion", "kind", "metadata", "spec"})});
    }
  }
  if (!saw_api)
    problems->push_back(
        {"apiVersion", std::string("missing; add 'apiVersion: ") + kApiVersion + "'"});
  if (!saw_kind) problems->push_back({"kind", std::string("missing; add 'kind: ") + kKind + "'"});
  if (!saw_spec)
    problems->push_back({"spec", "missing; add a 'spec:' section (it may be empty: 'spec: {}')"});
  return job;
}

StatusOr<ParsedJob> ParseJobSpecYaml(const std::string& text) {
  std::vector<SpecProblem> problems;
  ParsedJob job = ParseJobSpecYamlLenient(text, &problems);
  if (!problems.empty()) return SpecProblemsToStatus(problems);
  return job;
}

Status ValidateJobSpec(v1::JobSpec* spec) {
  ApplyJobSpecDefaults(spec);
  return SpecProblemsToStatus(JobSpecProblems(*spec));
}

StatusOr<ParsedJob> LoadJobSpecYaml(const std::string& text) {
  std::vector<SpecProblem> problems;
  ParsedJob job = ParseJobSpecYamlLenient(text, &problems);
  // A field that did not parse stays unset and would be reported again (as its default or
  // as a relation to it); report only value problems of fields that parsed.
  std::vector<std::string> bad_paths;
  for (const auto& p : problems) bad_paths.push_back(p.path.substr(0, p.path.find(' ')));
  ApplyJobSpecDefaults(&job.spec);
  auto add = [&](const std::vector<SpecProblem>& more) {
    for (const auto& p : more) {
      if (std::find(bad_paths.begin(), bad_paths.end(), p.path) == bad_paths.end())
        problems.push_back(p);
    }
  };
  add(JobMetadataProblems(job.metadata));
  add(JobSpecProblems(job.spec));
  if (!problems.empty()) return SpecProblemsToStatus(problems);
  return job;
}

std::string JobSpecToYaml(const ParsedJob& job) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << kApiVersion;
  out << YAML::Key << "kind" << YAML::Value << kKind;
  out << YAML::Key << "metadata" << YAML::Value;
  MessageToYaml(job.metadata, out);
  out << YAML::Key << "spec" << YAML::Value;
  MessageToYaml(job.spec, out);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace mlcd
