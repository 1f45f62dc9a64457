// The flags every process shares (docs/architecture.md, "Flags every process shares"), with one
// spelling everywhere:
//   services: --listen HOST:PORT, --metrics-listen HOST:PORT, --data-dir DIR, --log-level
//   peers:    --labelstore ADDR, --clusterd ADDR, --coordinator ADDR, each also read from
//             MLCD_LABELSTORE / MLCD_CLUSTERD / MLCD_COORDINATOR.
//   security: --tls-cert, --tls-key, --tls-ca, --tokens-file, --token-file, --insecure
//             (common/security.h; docs/security.md)
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "common/security.h"

namespace mlcd {

struct ServiceFlags {
  // gRPC listen address.
  std::string listen;
  // Prometheus /metrics listen address (empty = not served).
  std::string metrics_listen;
  // Plaintext gRPC health-only listen address for probes that cannot speak TLS (empty = not
  // served; GrpcServerRunner::SetHealthListen).
  std::string health_listen;
  // Where the service keeps its state.
  std::string data_dir;
  // debug | info | warning | error.
  std::string log_level = "info";
  // TLS, tokens, --insecure.
  SecurityOptions security;
};

// Default ports of the local (embedded) cluster.
constexpr int kDefaultCoordinatorPort = 7600;
constexpr int kDefaultLabelstorePort = 7610;
constexpr int kDefaultClusterdPort = 7620;
constexpr int kDefaultWorkerPort = 7630;

// Adds --listen, --metrics-listen, --data-dir and --log-level with the given defaults, and
// the server security flags (AddSecurityFlags, security.h).
void AddServiceFlags(CLI::App& app, ServiceFlags* flags, const std::string& default_listen,
                     const std::string& default_metrics_listen,
                     const std::string& default_data_dir);

// Applies --log-level and names the log component, then the security flags
// (ApplySecurityFlags), with the private copy of the TLS material under flags.data_dir
// (SecurityOptions::state_dir) unless the security flags name another place. Returns false
// (after printing why) when the level is unknown or a certificate, key or tokens file does
// not check out.
bool ApplyLogFlags(const ServiceFlags& flags, const std::string& component);

// Adds a peer address flag, e.g. AddPeerFlag(app, "labelstore", &addr, "127.0.0.1:7610")
// adds --labelstore ADDR with MLCD_LABELSTORE as its environment fallback.
CLI::Option* AddPeerFlag(CLI::App& app, const std::string& peer, std::string* address,
                         const std::string& default_address);

}  // namespace mlcd
