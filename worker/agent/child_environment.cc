#include "worker/agent/child_environment.h"

#include <unistd.h>

#include <algorithm>

namespace mlcd::worker {

const std::vector<std::string>& ChildWithheldVariables() {
  static const std::vector<std::string> kWithheld = {
      // Credentials.
      "MLCD_TLS_CERT", "MLCD_TLS_KEY", "MLCD_TLS_CA", "MLCD_TOKEN_FILE", "MLCD_TOKENS_FILE",
      "MLCD_INSECURE_TOKEN",
      // What the assignment carries.
      "MLCD_RANK", "MLCD_WORLD_SIZE", "MLCD_RENDEZVOUS", "MLCD_LABELSTORE"};
  return kWithheld;
}

std::vector<std::string> ChildEnvironment() {
  const std::vector<std::string>& withheld = ChildWithheldVariables();
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(withheld.begin(), withheld.end(), name) == withheld.end()) env.push_back(entry);
  }
  return env;
}

}  // namespace mlcd::worker
