// Error values with a location, and Result<T> (a value or a list of errors). See STYLE.md §6.
#pragma once
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace trctl {

enum class ErrCode {
  Io,            // file missing, unreadable, short read
  Format,        // bad magic, bad sizes, corrupt data
  Syntax,        // YAML syntax error
  UnknownKey,
  WrongType,
  OutOfRange,
  UnknownEnum,
  Missing,       // required key absent
  Invalid,       // semantically invalid combination
  NotSupported,  // feature exists in the spec but this backend cannot run it
  Internal,
};

// One error: `where` is "file:line:col" (or "file" / "file:offset N"), message is the human text.
struct Error {
  ErrCode code = ErrCode::Internal;
  std::string where;
  std::string message;
  std::string str() const { return where.empty() ? message : where + ": " + message; }
};

// Either a T or one or more errors (config validation reports all errors at once).
template <class T>
class Result {
 public:
  Result(T v) : v_(std::move(v)) {}                      // NOLINT: implicit by design
  Result(Error e) : v_(std::vector<Error>{std::move(e)}) {}  // NOLINT
  Result(std::vector<Error> es) : v_(std::move(es)) {}   // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const std::vector<Error>& errors() const { return std::get<1>(v_); }
  std::string error_text() const {
    std::string s;
    for (const auto& e : errors()) s += e.str() + "\n";
    return s;
  }

 private:
  std::variant<T, std::vector<Error>> v_;
};

// Result for functions that return nothing on success.
struct Unit {};
using Status = Result<Unit>;
inline Status ok_status() { return Unit{}; }

}  // namespace trctl
