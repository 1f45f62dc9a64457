#include "clients/write_capability.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cctype>
#include <charconv>
#include <vector>

#include "clients/labelstore_limits.h"

namespace mlcd::labelstore {
namespace {

constexpr char kVersion[] = "mlcdcap1";
constexpr size_t kMacHexChars = 64;

bool HolderCharOk(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
         c == '/' || c == '@' || c == '-';
}

bool ValidHolder(const std::string& holder) {
  if (holder.empty() || holder.size() > kMaxCapabilityHolderLength) return false;
  for (char c : holder) {
    if (!HolderCharOk(c)) return false;
  }
  return true;
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

// HMAC-SHA256 of `message` under `key`, as 64 hex characters.
std::string MacHex(const std::string& key, const std::string& message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return Hex(mac, len);
}

std::string Signed(const std::string& name, uint64_t incarnation, int64_t expires,
                   const std::string& holder) {
  return std::string(kVersion) + "|" + name + "|" + std::to_string(incarnation) + "|" +
         std::to_string(expires) + "|" + holder;
}

template <typename T>
bool ParseNumber(const std::string& text, T* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t at = text.find(sep, begin);
    parts.push_back(text.substr(begin, at == std::string::npos ? std::string::npos : at - begin));
    if (at == std::string::npos) return parts;
    begin = at + 1;
  }
}

}  // namespace

StatusOr<std::string> MintWriteCapability(const std::string& delegation_key,
                                          const std::string& name, uint64_t incarnation,
                                          int64_t expires_unix_seconds, const std::string& holder) {
  if (delegation_key.empty())
    return Status::InvalidArgument("minting a write capability needs the set's delegation key");
  if (!ValidHolder(holder)) {
    return Status::InvalidArgument("capability holder '" + holder + "' must be 1 to " +
                                   std::to_string(kMaxCapabilityHolderLength) +
                                   " characters of [A-Za-z0-9._:/@-]");
  }
  const std::string head = std::string(kVersion) + "|" + std::to_string(incarnation) + "|" +
                           std::to_string(expires_unix_seconds) + "|" + holder;
  return head + "|" +
         MacHex(delegation_key, Signed(name, incarnation, expires_unix_seconds, holder));
}

StatusOr<WriteCapability> VerifyWriteCapability(const DelegationKeyFn& delegation_key,
                                                const std::string& name, const std::string& text,
                                                int64_t now_unix_seconds) {
  const std::string refused = "the write capability presented for label set '" + name + "' ";
  const std::vector<std::string> parts = Split(text, '|');
  WriteCapability cap;
  if (parts.size() != 5 || parts[0] != kVersion || !ParseNumber(parts[1], &cap.incarnation) ||
      !ParseNumber(parts[2], &cap.expires_unix_seconds) || !ValidHolder(parts[3]) ||
      parts[4].size() != kMacHexChars) {
    return Status::PermissionDenied(refused +
                                    "is malformed; pass the capability of the assignment "
                                    "unchanged (" +
                                    std::string(kVersion) + "|...)");
  }
  cap.holder = parts[3];
  const std::string expected =
      MacHex(delegation_key(cap.incarnation),
             Signed(name, cap.incarnation, cap.expires_unix_seconds, cap.holder));
  if (expected.size() != parts[4].size() ||
      CRYPTO_memcmp(expected.data(), parts[4].data(), expected.size()) != 0) {
    return Status::PermissionDenied(refused + "(holder '" + cap.holder +
                                    "') was not issued for this set by its owner");
  }
  if (cap.expires_unix_seconds < now_unix_seconds) {
    return Status::PermissionDenied(
        refused + "(holder '" + cap.holder + "') expired " +
        std::to_string(now_unix_seconds - cap.expires_unix_seconds) +
        " s ago; the set's owner issues a new one (a job's gang gets one per assignment)");
  }
  return cap;
}

}  // namespace mlcd::labelstore
