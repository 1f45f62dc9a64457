#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>

namespace mlcd {

namespace {

// Whether a TCP listener could bind `port` on every IPv4 address right now (port 0: any).
// Returns the bound port, 0 when the bind failed.
int TryBind(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      bound = ntohs(addr.sin_port);
  }
  ::close(fd);
  return bound;
}

// The low end of the kernel's ephemeral port range (the ports it hands to outgoing
// connections and to bind(port 0)); 32768, Linux's default, when it cannot be read.
int EphemeralRangeLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (in >> low && low > kLowestPickedPort) return low;
  return 32768;
}

// Claims `port` for this host's PickFreePort callers: creates <dir>/<port> exclusively, or
// takes over a claim older than kPortClaimSeconds. False when another caller holds it. A
// host whose temporary folder cannot be written claims nothing (true: the bind test alone).
bool ClaimPort(int port) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/mlcd-port-claims-" + std::to_string(::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return true;
  const std::string path = dir + "/" + std::to_string(port);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    if (errno != EEXIST) return true;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // released meanwhile: try again
    if (::time(nullptr) - st.st_mtime < kPortClaimSeconds) return false;
    ::unlink(path.c_str());  // a stale claim
  }
  return false;
}

}  // namespace

int PickFreePort() {
  // Below the ephemeral range no outgoing connection of another process is given the port
  // between this check and its use; only a listener that chose it explicitly can take it.
  const int high = EphemeralRangeLow();
  std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> pick(kLowestPickedPort, high - 1);
  for (int attempt = 0; attempt < kPickPortAttempts; ++attempt) {
    const int port = pick(rng);
    if (TryBind(port) == port && ClaimPort(port)) return port;
  }
  return TryBind(0);
}

Status SplitHostPort(const std::string& address, const std::string& flag, std::string* host,
                     int* port) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(flag + " '" + address + "': " + why +
                                   "; expected HOST:PORT, e.g. 127.0.0.1:7610");
  };
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("missing host or port");
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::string p = address.substr(colon + 1);
  char* end = nullptr;
  long v = std::strtol(p.c_str(), &end, 10);
  if (p.empty() || *end != '\0' || v < 0 || v > 65535)
    return bad("port is not a number in [0, 65535]");
  *host = h;
  *port = static_cast<int>(v);
  return Status::Ok();
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace mlcd
