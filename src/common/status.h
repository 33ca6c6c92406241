// Status and StatusOr<T>: how every Meridian library reports failure.
//
// Errors are values. The codes are gRPC's canonical codes (as in abseil's
// absl/status/status.h) and carry the retry contract:
//   kUnavailable        retry this call;
//   kAborted            retry at a higher level (the whole transaction);
//   kFailedPrecondition do not retry until the system's state changes;
//   kInvalidArgument    the caller's input is wrong, retrying cannot help.
// Detail goes into the message, never into new codes.
//
// Thread-safety: value types; distinct objects may be used from distinct threads.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace meridian {

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

// "INVALID_ARGUMENT", "UNAVAILABLE", ... as gRPC spells them.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: fleet.yaml:3:7: ..." (or "OK").
  std::string ToString() const;

  // Returns a copy whose message is `prefix + ": " + message()`; OK stays OK.
  Status WithPrefix(std::string_view prefix) const;

  // Marks a status as deliberately dropped.
  void IgnoreError() const {}

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status FailedPreconditionError(std::string message);
Status UnavailableError(std::string message);
Status AbortedError(std::string message);
Status InternalError(std::string message);
Status ResourceExhaustedError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status DeadlineExceededError(std::string message);
Status DataLossError(std::string message);
Status CancelledError(std::string message);
Status PermissionDeniedError(std::string message);
Status UnauthenticatedError(std::string message);

namespace internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              std::string_view message);
}  // namespace internal

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : rep_(value) {}                 // NOLINT: implicit by design
  StatusOr(T&& value) : rep_(std::move(value)) {}           // NOLINT
  StatusOr(Status status) : rep_(std::move(status)) {       // NOLINT
    if (std::get<Status>(rep_).ok()) {
      internal::CheckFailed(__FILE__, __LINE__, "!status.ok()",
                            "StatusOr constructed from an OK Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(rep_); }
  Status status() const { return ok() ? OkStatus() : std::get<Status>(rep_); }

  const T& value() const& { CheckOk(); return std::get<T>(rep_); }
  T& value() & { CheckOk(); return std::get<T>(rep_); }
  T&& value() && { CheckOk(); return std::get<T>(std::move(rep_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckOk() const {
    if (!ok()) {
      internal::CheckFailed(__FILE__, __LINE__, "ok()", std::get<Status>(rep_).ToString());
    }
  }
  std::variant<T, Status> rep_;
};

}  // namespace meridian

#define MERIDIAN_CONCAT_INNER_(a, b) a##b
#define MERIDIAN_CONCAT_(a, b) MERIDIAN_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define MERIDIAN_RETURN_IF_ERROR(expr)                          \
  do {                                                          \
    ::meridian::Status meridian_status_ = (expr);               \
    if (!meridian_status_.ok()) return meridian_status_;        \
  } while (false)

// MERIDIAN_ASSIGN_OR_RETURN(auto x, StatusOrExpr()): declares/assigns the value,
// or returns the error from the enclosing function.
#define MERIDIAN_ASSIGN_OR_RETURN(lhs, expr) \
  MERIDIAN_ASSIGN_OR_RETURN_IMPL_(MERIDIAN_CONCAT_(meridian_statusor_, __LINE__), lhs, expr)
#define MERIDIAN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

// Stops the process when an invariant is broken; kept in release builds.
#define MERIDIAN_CHECK(cond)                                                   \
  do {                                                                         \
    if (!(cond)) ::meridian::internal::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (false)
#define MERIDIAN_CHECK_MSG(cond, msg)                                              \
  do {                                                                             \
    if (!(cond)) ::meridian::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (false)
