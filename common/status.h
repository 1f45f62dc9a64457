// Errors as values at service boundaries (LevelDB style).
//
// A Status is OK or carries a code (the gRPC code set, so it maps 1:1 onto grpc::Status)
// and a message that says what was wrong and how to fix it. StatusOr<T> is a value or the
// Status that explains why there is none.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace grpc {
class Status;
}

namespace mlcd {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "INVALID_ARGUMENT" etc.
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Unknown(std::string m) { return {StatusCode::kUnknown, std::move(m)}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NOT_FOUND: label set 'x' does not exist"; "OK" when ok.
  std::string ToString() const;

  // The same status with "context: " in front of the message.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Conversions to and from gRPC.
grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

// A T or the Status that says why there is none. Accessing value() of an error aborts.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("StatusOr constructed from OK without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void CheckOk() const;
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void DieOnBadStatusOrAccess(const Status& status);

template <typename T>
void StatusOr<T>::CheckOk() const {
  if (!status_.ok()) DieOnBadStatusOrAccess(status_);
}

}  // namespace mlcd

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define MLCD_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::mlcd::Status mlcd_status_ = (expr);        \
    if (!mlcd_status_.ok()) return mlcd_status_; \
  } while (0)

#define MLCD_CONCAT_INNER_(a, b) a##b
#define MLCD_CONCAT_(a, b) MLCD_CONCAT_INNER_(a, b)
// MLCD_ASSIGN_OR_RETURN(auto x, Foo()); declares x from a StatusOr or returns its error.
#define MLCD_ASSIGN_OR_RETURN(lhs, expr)                    \
  auto MLCD_CONCAT_(mlcd_statusor_, __LINE__) = (expr);     \
  if (!MLCD_CONCAT_(mlcd_statusor_, __LINE__).ok())         \
    return MLCD_CONCAT_(mlcd_statusor_, __LINE__).status(); \
  lhs = std::move(MLCD_CONCAT_(mlcd_statusor_, __LINE__)).value()
