// Errors as values. A Status is cheap when OK; StatusOr<T> carries a value or an error.
// No exceptions cross library boundaries, and none are thrown in `core`.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace paladin {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is malformed (a trace row, a flag, a request)
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,  // the system is not in a state where the call can succeed
  kResourceExhausted,   // not enough capacity (CPU, memory, GPU share, quota)
  kIoError,
  kInternal,
  kUnauthenticated,   // no valid credentials (HTTP 401)
  kPermissionDenied,  // credentials that do not allow the action (HTTP 403)
  kUnavailable,       // a service that cannot be reached or answered 5xx
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: pods.csv:12: field cpu_milli: ..." — for logs and CLI errors.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "StatusOr built from an OK status carries no value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace paladin

#define PALADIN_RETURN_IF_ERROR(expr) \
  do {                                \
    ::paladin::Status _st = (expr);   \
    if (!_st.ok()) return _st;        \
  } while (0)
