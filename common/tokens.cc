#include "common/tokens.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cctype>
#include <set>
#include <sstream>

#include "common/file_util.h"

namespace mlcd {
namespace {

std::array<uint8_t, 32> Digest(const std::string& token) {
  std::array<uint8_t, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

bool IsTokenChar(unsigned char c) { return c > 0x20 && c < 0x7f; }

bool ValidToken(const std::string& t) {
  if (t.size() < kMinTokenChars || t.size() > kMaxTokenChars) return false;
  for (unsigned char c : t)
    if (!IsTokenChar(c)) return false;
  return true;
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > kMaxTokenNameChars) return false;
  for (unsigned char c : n) {
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') return false;
  }
  return true;
}

}  // namespace

StatusOr<TokenTable> TokenTable::Parse(const std::string& text, const std::string& path) {
  if (text.size() > kMaxTokensFileBytes) {
    return Status::InvalidArgument("tokens file " + path + " is larger than " +
                                   std::to_string(kMaxTokensFileBytes) + " bytes");
  }
  TokenTable table;
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::istringstream fields(line);
    std::string token, role_name, name, extra, more;
    if (!(fields >> token) || token[0] == '#') continue;
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("tokens file " + path + " line " + std::to_string(n) + ": " +
                                     why + " (format: TOKEN ROLE NAME [expires=UNIX_SECONDS])");
    };
    if (!(fields >> role_name >> name)) return bad("expected TOKEN ROLE NAME");
    fields >> extra;
    if (fields >> more) return bad("too many fields");
    if (!ValidToken(token)) {
      return bad("the token must be " + std::to_string(kMinTokenChars) + " to " +
                 std::to_string(kMaxTokenChars) + " printable characters without spaces");
    }
    auto role = ParseTokenRole(role_name);
    if (!role.ok()) return bad(role.status().message());
    if (!ValidName(name)) return bad("name '" + name + "' must be 1-64 of [A-Za-z0-9._@-]");
    if (!names.insert(name).second) return bad("name '" + name + "' is used twice");
    TokenEntry entry;
    entry.digest = Digest(token);
    entry.role = *role;
    entry.name = name;
    if (!extra.empty()) {
      const std::string prefix = "expires=";
      char* end = nullptr;
      const std::string v = extra.rfind(prefix, 0) == 0 ? extra.substr(prefix.size()) : "";
      long long secs = v.empty() ? 0 : std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || secs <= 0) return bad("4th field must be expires=SECONDS");
      entry.expires_unix = secs;
    }
    for (const auto& e : table.entries_) {
      if (CRYPTO_memcmp(e.digest.data(), entry.digest.data(), entry.digest.size()) == 0)
        return bad("token of '" + name + "' is also the token of '" + e.name + "'");
    }
    table.entries_.push_back(std::move(entry));
  }
  return table;
}

StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return Status::InvalidArgument("--tokens-file " + path + ": cannot read it (" +
                                   text.status().message() + ")");
  }
  return Parse(*text, path);
}

const TokenEntry* TokenTable::Lookup(const std::string& token) const {
  const auto d = Digest(token);
  const TokenEntry* found = nullptr;
  for (const auto& e : entries_) {
    // Every entry is compared, whatever matched before.
    const bool eq = CRYPTO_memcmp(e.digest.data(), d.data(), d.size()) == 0;
    if (eq) found = &e;
  }
  return found;
}

StatusOr<std::string> ReadClientToken(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return Status::InvalidArgument("--token-file " + path + ": cannot read it (" +
                                   text.status().message() + ")");
  }
  std::istringstream in(*text);
  std::string token, rest;
  if (!(in >> token) || (in >> rest) || !ValidToken(token)) {
    return Status::InvalidArgument("--token-file " + path +
                                   ": must hold one token (16 to 256 printable characters, no "
                                   "spaces) and nothing else");
  }
  return token;
}

}  // namespace mlcd
