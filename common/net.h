// Address helpers.
#pragma once

#include <string>

#include "common/status.h"

namespace mlcd {

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close). Used by
// tests and by workers choosing their rendezvous port.
int PickFreePort();

// Splits "host:port" ("[::1]:80" too). INVALID_ARGUMENT naming `flag` when malformed.
Status SplitHostPort(const std::string& address, const std::string& flag, std::string* host,
                     int* port);

std::string JoinHostPort(const std::string& host, int port);

}  // namespace mlcd
