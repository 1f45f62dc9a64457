#include "common/format.h"

#include <cstdio>
#include <ctime>

namespace mlcd {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string FormatBytes(uint64_t bytes) {
  char buf[32];
  if (bytes < 1024)
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else if (bytes < (1u << 20))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
  else if (bytes < (1u << 30))
    std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1048576.0);
  else
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

std::string FormatUtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// The length of the valid UTF-8 sequence of 2 to 4 bytes at text[i], 0 when there is none.
size_t Utf8SequenceAt(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // up to U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size() || byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = i + 2; k < i + n; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
  }
  return n;
}

bool IsC0OrDel(unsigned char c) { return c < 0x20 || c == 0x7F; }

// A C1 control in UTF-8: U+0080..U+009F is C2 80..C2 9F.
bool IsC1At(std::string_view text, size_t i) {
  return static_cast<unsigned char>(text[i]) == 0xC2 && i + 1 < text.size() &&
         static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
         static_cast<unsigned char>(text[i + 1]) <= 0x9F;
}

void AppendHex(const char* prefix, unsigned char c, std::string* out) {
  static const char kDigits[] = "0123456789abcdef";
  *out += prefix;
  *out += kDigits[c >> 4];
  *out += kDigits[c & 15];
}

}  // namespace

std::string EscapeControlChars(std::string_view text, LineBreaks line_breaks) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80 && !IsC0OrDel(c)) {
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n' || c == '\t') {
      if (line_breaks == LineBreaks::kKeep)
        out += static_cast<char>(c);
      else
        out += c == '\n' ? "\\n" : "\\t";
      ++i;
    } else if (c == '\r') {
      out += "\\r";
      ++i;
    } else if (IsC0OrDel(c)) {
      AppendHex("\\x", c, &out);
      ++i;
    } else if (IsC1At(text, i)) {
      AppendHex("\\u00", static_cast<unsigned char>(text[i + 1]), &out);
      i += 2;
    } else if (const size_t n = Utf8SequenceAt(text, i); n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      AppendHex("\\x", c, &out);  // not UTF-8
      ++i;
    }
  }
  return out;
}

bool HasControlChars(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsC0OrDel(static_cast<unsigned char>(text[i])) || IsC1At(text, i)) return true;
  }
  return false;
}

}  // namespace mlcd
