// Address helpers.
#pragma once

#include <string>

#include "common/status.h"

namespace mlcd {

// Where PickFreePort looks: random ports from here up to the kernel's ephemeral range.
inline constexpr int kLowestPickedPort = 20000;
// Random ports PickFreePort tries before it takes one from the ephemeral range.
inline constexpr int kPickPortAttempts = 64;
// How long a port PickFreePort handed out stays claimed against this host's other callers.
inline constexpr int kPortClaimSeconds = 120;

// A TCP port that no listener held a moment ago (a test bind on every IPv4 address). It is
// chosen at random below the kernel's ephemeral range, so no outgoing connection is given it
// before the caller listens there. A port handed out is claimed for kPortClaimSeconds (a file
// in $TMPDIR/mlcd-port-claims-<uid>), so two callers on one host, in any processes, are not
// given the same port while both may still be about to listen on it. A listener that chose
// the port by other means still may take it, so a caller that fails to bind should pick
// again. 0 when no port could be found. Used by tests and by workers choosing their
// rendezvous port.
int PickFreePort();

// Splits "host:port" ("[::1]:80" too). INVALID_ARGUMENT naming `flag` when malformed.
Status SplitHostPort(const std::string& address, const std::string& flag, std::string* host,
                     int* port);

std::string JoinHostPort(const std::string& host, int port);

}  // namespace mlcd
