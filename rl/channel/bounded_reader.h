// channel/bounded_reader.h: the trajectory group decoder's MessagePack
// reader (group_codec.cc only). nlohmann::json's SAX events, checked against
// the group schema's limits as they arrive, then handed to nlohmann's own
// DOM builder; json::from_msgpack, which builds a whole DOM of anything
// before any check, is never used (issue 30, finding 5).
//
// Contract
// - Use: json j; BoundedReader r(j); bool ok = json::sax_parse(first, last,
//   &r, json::input_format_t::msgpack); then r.error() is "" exactly when
//   ok, and j is the map read.
// - On the first value over a limit the reader returns false, so the parse
//   stops there: nothing after it is read or stored. error() says which
//   limit, and "(found while reading)".
// - Errors are values, never exceptions (the DOM builder runs without them).
// - One object per parse; any thread.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "channel/group_codec.h"

namespace channel {

// Reads MessagePack into a DOM through nlohmann's SAX interface and refuses,
// as it reads and before it stores anything more, whatever the group schema
// cannot hold: a top value that is not a map; a container inside the top map
// that is not an array, inside an array that is not a map, inside a
// trajectory map at all (so depth <= 3, and the reader's recursion with it);
// maps of more than kMaxMapEntries entries, arrays of more than
// kMaxTrajectories; keys over kMaxKeyBytes, strings over kMaxStringBytes,
// binaries over kMaxBinaryBytes; more than kMaxValues values in all.
class BoundedReader {
 public:
  explicit BoundedReader(nlohmann::json& root) : dom_(root, false) {}
  const std::string& error() const { return error_; }

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(nlohmann::json::number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(nlohmann::json::number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(nlohmann::json::number_float_t v, const nlohmann::json::string_t& s) {
    return value() && dom_.number_float(v, s);
  }
  bool string(nlohmann::json::string_t& v) {
    if (v.size() > kMaxStringBytes) return fail("a string of " + std::to_string(v.size()) + " bytes");
    return value() && dom_.string(v);
  }
  bool binary(nlohmann::json::binary_t& v) {
    if (v.size() > kMaxBinaryBytes) return fail("a binary of " + std::to_string(v.size()) + " bytes");
    return value() && dom_.binary(v);
  }
  bool key(nlohmann::json::string_t& v) {
    if (v.size() > kMaxKeyBytes) return fail("a key of " + std::to_string(v.size()) + " bytes");
    return dom_.key(v);
  }
  bool start_object(std::size_t n) {
    if (!container('m', n, kMaxMapEntries)) return false;
    return dom_.start_object(n);
  }
  bool end_object() {
    stack_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (!container('a', n, kMaxTrajectories)) return false;
    return dom_.start_array(n);
  }
  bool end_array() {
    stack_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    return fail(std::string("not valid MessagePack: ") + e.what());
  }

 private:
  static constexpr std::size_t kMaxMapEntries = 32;
  static constexpr std::size_t kMaxKeyBytes = 64;
  static constexpr std::size_t kMaxStringBytes = 4096;
  static constexpr std::size_t kMaxBinaryBytes = 4 * kMaxTokens;
  static constexpr std::size_t kMaxValues = 1 + kMaxMapEntries * (1 + kMaxTrajectories) + kMaxTrajectories;

  bool fail(const std::string& why) {
    if (error_.empty()) error_ = why + " (found while reading)";
    return false;
  }
  bool value() {
    if (++values_ > kMaxValues) return fail("more than " + std::to_string(kMaxValues) + " values");
    if (stack_.empty()) return fail("not a map");
    return true;
  }
  // kind 'm' or 'a'; where it may stand: the top is a map, a map holds arrays
  // only at the top, an array holds maps, and a trajectory map holds no container.
  bool container(char kind, std::size_t n, std::size_t max) {
    if (++values_ > kMaxValues) return fail("more than " + std::to_string(kMaxValues) + " values");
    const std::string path(stack_.begin(), stack_.end());
    const bool allowed =
        (path.empty() && kind == 'm') || (path == "m" && kind == 'a') || (path == "ma" && kind == 'm');
    if (!allowed) return fail(path.empty() ? "not a map" : "a container nested where the schema has none");
    if (n == static_cast<std::size_t>(-1) || n > max)
      return fail(std::string(kind == 'm' ? "a map of " : "an array of ") + std::to_string(n) +
                  " entries (at most " + std::to_string(max) + ")");
    stack_.push_back(kind);
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<nlohmann::json> dom_;
  std::vector<char> stack_;
  std::size_t values_ = 0;
  std::string error_;
};

}  // namespace channel
