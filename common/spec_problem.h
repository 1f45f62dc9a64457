// One problem found in a spec document, by the YAML reader (common/yaml_proto.h) or the
// value checks (common/spec_validation.h): where, as a field path, and what.
#pragma once

#include <string>

namespace mlcd {

struct SpecProblem {
  // A field path such as "spec.clustering.l", optionally followed by " (line N)" of the YAML
  // text; empty for a problem of the whole document.
  std::string path;
  std::string message;
  std::string ToString() const { return path.empty() ? message : path + ": " + message; }
};

}  // namespace mlcd
