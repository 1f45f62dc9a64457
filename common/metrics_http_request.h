// The request side of the /metrics HTTP server (common/metrics_http.h): what to answer to
// the bytes a client has sent so far, and the answer itself. No sockets here, so that
// libFuzzer drives it byte by byte (tests/fuzz/fuzz_metrics_http.cc).
//
// A request head is the request line and the header lines up to the first empty line; lines
// end with "\r\n" (a bare "\n" is taken too). Only the request line is read:
//   METHOD SP TARGET SP HTTP/1.0|HTTP/1.1
// with METHOD of token characters and TARGET an origin-form path ("/..." of visible ASCII).
// Headers are skipped (a scrape needs none). The verdict, in the order it is decided:
//   a head over max_request_bytes               -> kTooLarge    (431)
//   a request line not of that form             -> kMalformed   (400)
//   a method other than GET or HEAD             -> kBadMethod   (405)
//   a path other than /metrics (a query is fine) -> kNotFound   (404)
//   otherwise                                   -> kMetrics     (200)
// Each connection carries one request and is closed after the answer (Connection: close).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/limits.h"

namespace mlcd {

enum class MetricsHttpVerdict {
  kIncomplete,  // no empty line yet and still within the size bound: wait for more bytes
  kMetrics,
  kNotFound,
  kBadMethod,
  kMalformed,
  kTooLarge,
};

// The status line's code and reason of a final verdict ("404 Not Found").
const char* MetricsHttpStatus(MetricsHttpVerdict verdict);

// Reads one request head incrementally: the work per byte is constant, so a client
// trickling its request a byte at a time costs no more than one sending it at once.
class MetricsRequestParser {
 public:
  explicit MetricsRequestParser(size_t max_request_bytes = kMaxMetricsHttpRequestBytes)
      : max_request_bytes_(max_request_bytes) {}

  // Adds the next bytes the client sent; returns the verdict so far. Once it is final
  // (not kIncomplete) it stays so and later bytes are ignored.
  MetricsHttpVerdict Feed(std::string_view bytes);
  MetricsHttpVerdict verdict() const { return verdict_; }
  // True for a well-formed HEAD request: the answer then has no body.
  bool head() const { return head_; }

 private:
  // Decides on the complete request line.
  MetricsHttpVerdict Judge(std::string_view request_line);

  size_t max_request_bytes_;
  size_t seen_ = 0;           // bytes of the head taken so far
  std::string request_line_;  // the first line, "\r" left out, while it is being read
  bool in_request_line_ = true;
  size_t line_length_ = 0;  // of the line being read, "\r" left out
  bool pending_cr_ = false;
  bool head_ = false;
  MetricsHttpVerdict verdict_ = MetricsHttpVerdict::kIncomplete;
};

// The whole answer to a final verdict: status line, Content-Type, Content-Length, Connection:
// close, and the body (`metrics_text` for kMetrics, a line saying what was wrong otherwise),
// left out when `head_only`.
std::string MetricsHttpAnswer(MetricsHttpVerdict verdict, bool head_only,
                              const std::string& metrics_text,
                              size_t max_request_bytes = kMaxMetricsHttpRequestBytes);

}  // namespace mlcd
