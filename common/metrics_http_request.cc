#include "common/metrics_http_request.h"

#include <cstring>

namespace mlcd {
namespace {

// RFC 9110's tchar.
bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool IsVisibleAscii(char c) { return c > 0x20 && c < 0x7f; }

bool AllOf(std::string_view s, bool (*pred)(char)) {
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return !s.empty();
}

}  // namespace

const char* MetricsHttpStatus(MetricsHttpVerdict verdict) {
  switch (verdict) {
    case MetricsHttpVerdict::kMetrics:
      return "200 OK";
    case MetricsHttpVerdict::kNotFound:
      return "404 Not Found";
    case MetricsHttpVerdict::kBadMethod:
      return "405 Method Not Allowed";
    case MetricsHttpVerdict::kMalformed:
      return "400 Bad Request";
    case MetricsHttpVerdict::kTooLarge:
      return "431 Request Header Fields Too Large";
    case MetricsHttpVerdict::kIncomplete:
      break;
  }
  return "500 Internal Server Error";
}

MetricsHttpVerdict MetricsRequestParser::Feed(std::string_view bytes) {
  for (char ch : bytes) {
    if (verdict_ != MetricsHttpVerdict::kIncomplete) break;
    if (seen_ >= max_request_bytes_) {
      verdict_ = MetricsHttpVerdict::kTooLarge;
      break;
    }
    ++seen_;
    if (ch == '\n') {
      if (in_request_line_) {
        in_request_line_ = false;
        if (line_length_ == 0) verdict_ = MetricsHttpVerdict::kMalformed;  // no request line
      } else if (line_length_ == 0) {
        verdict_ = Judge(request_line_);  // the empty line: the head is complete
      }
      line_length_ = 0;
      pending_cr_ = false;
      continue;
    }
    if (pending_cr_) {  // a '\r' not followed by '\n' belongs to the line
      ++line_length_;
      if (in_request_line_) request_line_.push_back('\r');
      pending_cr_ = false;
    }
    if (ch == '\r') {
      pending_cr_ = true;
      continue;
    }
    ++line_length_;
    if (in_request_line_) request_line_.push_back(ch);
  }
  return verdict_;
}

MetricsHttpVerdict MetricsRequestParser::Judge(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return MetricsHttpVerdict::kMalformed;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!AllOf(method, IsTokenChar) || !AllOf(target, IsVisibleAscii) || target[0] != '/' ||
      (version != "HTTP/1.1" && version != "HTTP/1.0")) {
    return MetricsHttpVerdict::kMalformed;
  }
  if (method != "GET" && method != "HEAD") return MetricsHttpVerdict::kBadMethod;
  head_ = method == "HEAD";
  const std::string_view path = target.substr(0, target.find('?'));
  return path == "/metrics" ? MetricsHttpVerdict::kMetrics : MetricsHttpVerdict::kNotFound;
}

std::string MetricsHttpAnswer(MetricsHttpVerdict verdict, bool head_only,
                              const std::string& metrics_text, size_t max_request_bytes) {
  std::string type = "text/plain; charset=utf-8";
  std::string body;
  switch (verdict) {
    case MetricsHttpVerdict::kMetrics:
      type = "text/plain; version=0.0.4; charset=utf-8";
      body = metrics_text;
      break;
    case MetricsHttpVerdict::kNotFound:
      body = "metrics are at /metrics\n";
      break;
    case MetricsHttpVerdict::kBadMethod:
      body = "only GET /metrics (or HEAD)\n";
      break;
    case MetricsHttpVerdict::kMalformed:
      body = "not an HTTP/1.x request line; send 'GET /metrics HTTP/1.1'\n";
      break;
    case MetricsHttpVerdict::kTooLarge:
      body = "request header over " + std::to_string(max_request_bytes) +
             " bytes; GET /metrics needs no headers\n";
      break;
    case MetricsHttpVerdict::kIncomplete:
      body = "no complete request\n";
      break;
  }
  std::string answer =
      std::string("HTTP/1.1 ") + MetricsHttpStatus(verdict) + "\r\nContent-Type: " + type +
      "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head_only) answer += body;
  return answer;
}

}  // namespace mlcd
