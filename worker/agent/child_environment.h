// What a worker agent's children get of its environment: its variables less two groups, and
// none of its credential files.
//   - The agent's credentials: the TLS certificate, key and CA (MLCD_TLS_CERT, MLCD_TLS_KEY,
//     MLCD_TLS_CA), the bearer token file (MLCD_TOKEN_FILE), a tokens file and the plaintext
//     opt-in. A child decodes data it did not choose; with the agent's certificate an exploit
//     in a decoder could act as a service. A child reaches the label store only through the
//     agent's label gateway (worker/agent/label_gateway.h) and needs none of them.
//   - The variables through which a worker command takes its rank, gang and label store when
//     run by hand (MLCD_RANK, ...). An assignment carries all of them, and such a variable
//     counts as an explicit flag, so one left in the agent's own environment (say from a shell
//     that sourced another cluster's env file) would override the coordinator's values: a
//     child dialling a label store that is gone, or joining the wrong rendezvous.
#pragma once

#include <string>
#include <vector>

#include "common/security.h"

namespace mlcd::worker {

// The names of the variables a child never gets (the agent passes them as
// SpawnOptions::unset_env).
const std::vector<std::string>& ChildWithheldVariables();

// The files a child may not read (common/withheld_files.h), as absolute paths: the agent's
// TLS key, its token file and tokens file, and the private copy of its TLS material
// (<data_dir>/tls-private). The certificate and CA are public and stay readable.
std::vector<std::string> ChildWithheldFiles(const SecurityOptions& agent_security,
                                            const std::string& data_dir);

}  // namespace mlcd::worker
