// mlcdctl: the command-line client of the MLCD training system.
#include <iostream>

#include "client/cli.h"
#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/security.h"

int main(int argc, char** argv) {
  mlcd::cli::Context ctx;
  CLI::App app{
      "mlcdctl: drive the MLCD training system (jobs, label sets, clustering).\n\n"
      "Service addresses come from the flags below or the environment (MLCD_COORDINATOR,\n"
      "MLCD_LABELSTORE, MLCD_CLUSTERD); TLS and the bearer token from --tls-ca, --tls-cert,\n"
      "--tls-key, --token-file or MLCD_TLS_CA, MLCD_TLS_CERT, MLCD_TLS_KEY, MLCD_TOKEN_FILE\n"
      "(docs/security.md; `source <dir>/env` after `mlcdctl local up` sets them all). The token\n"
      "goes only over TLS: without --tls-ca it is refused (exit 5), except to a loopback address\n"
      "with --insecure before the command (or MLCD_INSECURE_TOKEN=1).\n\n"
      "Exit codes: 0 ok, 1 failure, 2 bad arguments, 3 not found, 4 already exists,\n"
      "5 failed precondition, 6 service unavailable or timed out, 7 cancelled (e.g. Ctrl-C or\n"
      "SIGTERM while watching a job, which keeps running), 8 refused: UNAUTHENTICATED or\n"
      "PERMISSION_DENIED (no, unknown or expired token; a role that may not), 10 watched job failed, 11 watched job cancelled.",
      "mlcdctl"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "show help for every command");
  mlcd::AddPeerFlag(app, "coordinator", &ctx.coordinator,
                    "127.0.0.1:" + std::to_string(mlcd::kDefaultCoordinatorPort));
  mlcd::AddPeerFlag(app, "labelstore", &ctx.labelstore,
                    "127.0.0.1:" + std::to_string(mlcd::kDefaultLabelstorePort));
  mlcd::AddPeerFlag(app, "clusterd", &ctx.clusterd,
                    "127.0.0.1:" + std::to_string(mlcd::kDefaultClusterdPort));
  app.add_option("--output,-o", ctx.output, "output format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--timeout", ctx.timeout_seconds, "deadline in seconds for single requests")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // TLS (on when --tls-ca / MLCD_TLS_CA is set), the bearer token (--token-file /
  // MLCD_TOKEN_FILE) and --insecure (the token in plaintext to loopback), applied before any
  // command runs.
  mlcd::SecurityOptions security;
  mlcd::AddSecurityFlags(app, &security, /*server=*/false);
  app.parse_complete_callback([&app, &security] {
    // `local` sets up (or reads) its cluster's own certificates and tokens.
    if (app.got_subcommand("local")) return;
    if (!mlcd::ApplySecurityFlags(security)) throw CLI::RuntimeError(mlcd::cli::kExitUsage);
  });
  mlcd::cli::AddRegisteredCommands(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : mlcd::cli::kExitUsage;
  }
  return ctx.exit_code;
}
