// mlcd-worker: trains the ViT with the sharded MLCD loss; see `mlcd-worker --help`.
#include "common/blas_env.h"
#include "common/malloc_env.h"
#include "worker/command.h"
#include "worker/dist/collectives.h"

int main(int argc, char** argv) {
  mlcd::SelectOpenblasCoretype(argc, argv);
  mlcd::KeepFreedMemoryForReuse();  // common/malloc_env.h
  mlcd::worker::SetNcclEnvironmentDefaults();  // before any thread: setenv is not thread-safe
  int exit_code = 0;
  CLI::App app{"mlcd-worker: ViT training with the sharded PartialFC MLCD loss over c10d",
               "mlcd-worker"};
  app.require_subcommand(1);
  mlcd::worker::AddRegisteredCommands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
