// libFuzzer target: the YAML job spec parser, the defaults and the validation, and the error a
// caller would get (fitted to gRPC metadata).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error_message.h"
#include "common/job_spec.h"
#include "common/spec_validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<mlcd::SpecProblem> problems;
  mlcd::ParsedJob job = mlcd::ParseJobSpecYamlLenient(text, &problems);
  mlcd::ApplyJobSpecDefaults(&job.spec);
  for (auto& p : mlcd::JobSpecProblems(job.spec)) problems.push_back(std::move(p));
  for (auto& p : mlcd::JobMetadataProblems(job.metadata)) problems.push_back(std::move(p));
  const mlcd::Status status = mlcd::SpecProblemsToStatus(problems);
  (void)mlcd::FitErrorMessage(status.message());
  auto loaded = mlcd::LoadJobSpecYaml(text);
  if (loaded.ok()) (void)mlcd::JobSpecToYaml(*loaded);
  return 0;
}
