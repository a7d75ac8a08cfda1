// zorplex/result.h: errors as values for the Zorplex library.
//
// Contract
// - Fallible calls (parsing a kind or difficulty name, parsing a tool call,
//   hashing a key) return Result<T>: either a value or an Error whose message
//   says what went wrong and, where it helps, what the valid inputs are.
// - No function of this library throws on bad input; only std::bad_alloc can
//   escape, as from any function that builds a standard container.
// - Result is a plain value type: copyable, movable, not synchronised.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace zorplex {

// What went wrong, in words meant for a person.
struct Error {
  std::string message;
};

// Either a T or an Error. value() and error() may only be called on the
// matching alternative (checked with ok()).
template <typename T>
class Result {
 public:
  Result(T value) : data_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : data_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return data_.index() == 0; }
  explicit operator bool() const { return ok(); }

  const T& value() const& { return std::get<0>(data_); }
  T& value() & { return std::get<0>(data_); }
  T&& value() && { return std::get<0>(std::move(data_)); }
  const Error& error() const { return std::get<1>(data_); }

 private:
  std::variant<T, Error> data_;
};

}  // namespace zorplex
