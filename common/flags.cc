#include "common/flags.h"

#include <algorithm>
#include <cctype>
#include <iostream>

#include "common/log.h"

namespace mlcd {

void AddServiceFlags(CLI::App& app, ServiceFlags* flags, const std::string& default_listen,
                     const std::string& default_metrics_listen,
                     const std::string& default_data_dir) {
  flags->listen = default_listen;
  flags->metrics_listen = default_metrics_listen;
  flags->data_dir = default_data_dir;
  app.add_option("--listen", flags->listen,
                 "gRPC listen address HOST:PORT (port 0 picks a free one)")
      ->capture_default_str();
  app.add_option("--metrics-listen", flags->metrics_listen,
                 "Prometheus /metrics listen address HOST:PORT (empty: no metrics endpoint)")
      ->capture_default_str();
  app.add_option("--health-listen", flags->health_listen,
                 "plaintext gRPC health-only listen address HOST:PORT for probes that cannot "
                 "speak TLS (empty: none)");
  app.add_option("--data-dir", flags->data_dir, "directory where the service keeps its state")
      ->capture_default_str();
  app.add_option("--log-level", flags->log_level, "debug | info | warning | error")
      ->capture_default_str();
  AddSecurityFlags(app, &flags->security, /*server=*/true);
}

bool ApplyLogFlags(const ServiceFlags& flags, const std::string& component) {
  SetLogComponent(component);
  LogLevel level;
  if (!ParseLogLevel(flags.log_level, &level)) {
    std::cerr << "error: --log-level " << flags.log_level
              << " is not one of debug, info, warning, error\n";
    return false;
  }
  SetLogLevel(level);
  SecurityOptions security = flags.security;
  if (security.state_dir.empty()) security.state_dir = flags.data_dir;
  return ApplySecurityFlags(security);
}

CLI::Option* AddPeerFlag(CLI::App& app, const std::string& peer, std::string* address,
                         const std::string& default_address) {
  std::string env = "MLCD_" + peer;
  std::transform(env.begin(), env.end(), env.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  *address = default_address;
  return app
      .add_option("--" + peer, *address, "address HOST:PORT of mlcd-" + peer + " (env " + env + ")")
      ->envname(env)
      ->capture_default_str();
}

}  // namespace mlcd
