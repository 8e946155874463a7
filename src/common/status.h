// Status and StatusOr<T>: how bad user input travels (never an abort, never an exception in the
// step loop). A Status carries a code that the server maps to an HTTP status and a message that
// names the problem. Must not be used for broken invariants: those are KVASIR_CHECK (check.h).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kvasir {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad user input: 400
  kNotFound,           // missing file, unknown model: 404
  kOutOfRange,         // value or length past a limit: 400
  kResourceExhausted,  // queue full, no memory: 429/503
  kUnavailable,        // shutting down, engine dead: 503
  kDataLoss,           // corrupt or truncated file
  kUnimplemented,      // a feature or format we do not support
  kInternal,           // a fault of ours reported to the caller
  kCancelled,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status s) : v_(std::move(s)) {}  // NOLINT: implicit by design, like absl
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace kvasir

#define KVASIR_CONCAT_INNER(a, b) a##b
#define KVASIR_CONCAT(a, b) KVASIR_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define KVASIR_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::kvasir::Status kvasir_status_ = (expr);     \
    if (!kvasir_status_.ok()) return kvasir_status_; \
  } while (0)

// `KVASIR_ASSIGN_OR_RETURN(auto x, make_x());` unwraps a StatusOr or returns its Status.
#define KVASIR_ASSIGN_OR_RETURN(lhs, expr) \
  KVASIR_ASSIGN_OR_RETURN_IMPL(KVASIR_CONCAT(kvasir_or_, __LINE__), lhs, expr)
#define KVASIR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
