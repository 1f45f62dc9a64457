// The tokens file: the bearer tokens a service accepts, each with a role and a name
// (docs/security.md, "Tokens file").
//
//   # token                           role       name     [expires=UNIX_SECONDS]
//   9f2c1e0b7a4d4c3f8e6a5b2d1c0f9e8a  submitter  alice
//   0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e  viewer     grafana  expires=1798761600
//
// One token per line, fields separated by spaces or tabs; '#' starts a comment line. A token
// is 16 to 256 printable, non-space ASCII characters; names are unique ([A-Za-z0-9._@-],
// at most 64). A token past its `expires` time is refused as expired.
//
// Only SHA-256 digests of the tokens are kept in memory; Lookup() compares the digest of
// the presented token with every entry in constant time (CRYPTO_memcmp, no early exit), so
// neither timing nor logs reveal a token. Messages name entries by line and name, never by
// token.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/access_policy.h"
#include "common/status.h"

namespace mlcd {

constexpr size_t kMinTokenChars = 16;
constexpr size_t kMaxTokenChars = 256;
constexpr size_t kMaxTokenNameChars = 64;
constexpr size_t kMaxTokensFileBytes = 1 << 20;

struct TokenEntry {
  std::array<uint8_t, 32> digest{};
  Role role = Role::kNone;
  std::string name;
  // Unix seconds after which the token is refused; 0 = no expiry.
  int64_t expires_unix = 0;
};

class TokenTable {
 public:
  // Parses a tokens file's text; INVALID_ARGUMENT naming `path`, the line and what is wrong.
  static StatusOr<TokenTable> Parse(const std::string& text, const std::string& path);
  static StatusOr<TokenTable> Load(const std::string& path);

  // The entry whose token is `token`, or nullptr.
  const TokenEntry* Lookup(const std::string& token) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<TokenEntry> entries_;
};

// The first token in a client's token file (`--token-file`): the file holds the token alone
// (surrounding white space ignored). INVALID_ARGUMENT when it is empty or not a token.
StatusOr<std::string> ReadClientToken(const std::string& path);

}  // namespace mlcd
