#include "common/output_area_names.h"

#include <cstdio>

#include "common/acting_for.h"
#include "common/data_roots.h"

namespace mlcd {
namespace {

bool SafeChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '@' || c == '-';
}

}  // namespace

std::string EscapePathSegment(const std::string& name) {
  const bool dots_only = name.find_first_not_of('.') == std::string::npos;
  std::string out;
  for (char c : name) {
    if (SafeChar(c) && !(dots_only && c == '.')) {
      out += c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", static_cast<unsigned char>(c));
      out += hex;
    }
  }
  return out.empty() ? "%" : out;
}

std::string OutputAreaOf(const std::string& root, const std::string& identity) {
  const size_t colon = identity.find(':');
  const std::string kind = colon == std::string::npos ? "" : identity.substr(0, colon);
  const std::string name = colon == std::string::npos ? identity : identity.substr(colon + 1);
  if (kind + ":" == kJobIdentityPrefix) return root + "/jobs/" + EscapePathSegment(name);
  if (identity.empty()) return root + "/users/anonymous";
  return root + "/users/" + EscapePathSegment(kind) + "/" + EscapePathSegment(name);
}

bool InsideArea(const std::string& resolved, const std::string& area) {
  return resolved != area && PathIsUnder(resolved, area);
}

}  // namespace mlcd
