#include "worker/agent/child_environment.h"

#include <filesystem>

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

std::vector<std::string> ChildWithheldFiles(const SecurityOptions& agent_security,
                                            const std::string& data_dir) {
  std::vector<std::string> files;
  for (const std::string& path :
       {agent_security.tls.key, agent_security.token_file, agent_security.tokens_file,
        data_dir.empty() ? std::string() : data_dir + "/tls-private"}) {
    if (path.empty()) continue;
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    files.push_back(ec ? path : absolute.lexically_normal().string());
  }
  return files;
}

}  // namespace mlcd::worker
