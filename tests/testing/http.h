// Plain HTTP and TCP on loopback for tests (e.g. scraping a service's /metrics).
#pragma once

#include <string>

namespace mlcd::testing {

// A connected TCP socket to host:port (IPv4, default 127.0.0.1), or -1 when it cannot connect.
// `source` (an IPv4 address, e.g. 127.0.0.2; empty: the kernel's choice) is the address it
// connects from.
int ConnectTcp(int port, const std::string& host = "127.0.0.1", const std::string& source = "");

// GET `path` over HTTP/1.0 from host:port: the whole response (status line, headers, body),
// read until the server closes; "" when the connection fails.
std::string HttpGet(int port, const std::string& path, const std::string& host = "127.0.0.1");

}  // namespace mlcd::testing
