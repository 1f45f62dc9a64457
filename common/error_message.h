// Error messages that must reach a caller whole enough to act on: gRPC carries a status
// message in its trailing metadata, which receivers cap (8 KiB by default) and then replace by
// "metadata size exceeds limit". ToGrpcStatus (common/status.h) fits every message with
// FitErrorMessage.
#pragma once

#include <cstddef>
#include <string>

#include "common/limits.h"

namespace mlcd {

// `message` when it fits `max_bytes`, else its head (cut at a line end where one is near,
// never inside a UTF-8 sequence) and "... (N more bytes left out)"; the result is at most
// `max_bytes` + 40 bytes.
std::string FitErrorMessage(const std::string& message, size_t max_bytes = kMaxErrorMessageBytes);

}  // namespace mlcd
