#include "common/status.h"

#include <grpcpp/support/status.h>

#include <cstdio>
#include <cstdlib>

#include "common/error_message.h"

namespace mlcd {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      FitErrorMessage(status.message()));
}

std::string FitErrorMessage(const std::string& message, size_t max_bytes) {
  if (message.size() <= max_bytes) return message;
  size_t keep = max_bytes > 64 ? max_bytes - 64 : max_bytes / 2;
  // Cut at a line end when there is one near, and never inside a UTF-8 sequence.
  const size_t newline = message.rfind('\n', keep);
  if (newline != std::string::npos && newline > keep / 2) keep = newline;
  while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;
  return message.substr(0, keep) + "\n  ... (" + std::to_string(message.size() - keep) +
         " more bytes left out)";
}

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  int code = static_cast<int>(status.error_code());
  if (code < 0 || code > static_cast<int>(StatusCode::kUnauthenticated))
    code = static_cast<int>(StatusCode::kUnknown);
  return Status(static_cast<StatusCode>(code), status.error_message());
}

void DieOnBadStatusOrAccess(const Status& status) {
  std::fprintf(stderr, "fatal: value() of a StatusOr holding %s\n", status.ToString().c_str());
  std::abort();
}

}  // namespace mlcd
