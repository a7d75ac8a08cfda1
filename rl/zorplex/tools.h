// zorplex/tools.h: executing LOOKUP, GETKEY and FETCH.
//
// Contract
// - A Toolbox answers tool calls for one task kind at one seed. It is
//   immutable after construction: execute() is const and safe from any number
//   of threads. It owns copies of everything it uses (plain value type).
// - The kinds offer: simple, compositional and recursive LOOKUP;
//   multi_step GETKEY and FETCH. Any other name (including a real tool the
//   kind does not offer) gives UNKNOWN_TOOL.
// - Results, as the spec gives them: LOOKUP[word] the word's value (for
//   recursive, the map entry: a value or "SEE: <word>"), UNKNOWN for a word
//   not in the table; GETKEY[word] the word's key (keys.h), UNKNOWN_WORD for
//   an unknown word; FETCH[key] the value of the word with that key,
//   INVALID_KEY otherwise. Word arguments are lower-cased and FETCH keys
//   upper-cased (ASCII) before use. Reverse key lookup goes through the words
//   in list order, so were two words ever to share a key, the first wins (the
//   original's key cache would pick the last one fetched by GETKEY).
// - Errors are results, never exceptions: the model sees the error string.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zorplex/kinds.h"
#include "zorplex/redirect_map.h"
#include "zorplex/value_table.h"

namespace zorplex {

// Canonical (upper-case) tool names and the error results.
inline constexpr const char* kLookup = "LOOKUP";
inline constexpr const char* kGetKey = "GETKEY";
inline constexpr const char* kFetch = "FETCH";
inline constexpr const char* kUnknown = "UNKNOWN";
inline constexpr const char* kUnknownWord = "UNKNOWN_WORD";
inline constexpr const char* kInvalidKey = "INVALID_KEY";
inline constexpr const char* kUnknownTool = "UNKNOWN_TOOL";
// GETKEY when MD5 is unavailable (keys.h); never seen with a stock OpenSSL.
inline constexpr const char* kKeyUnavailable = "KEY_UNAVAILABLE";

// A tool call: name as parsed (protocol.h gives the canonical upper-case
// name) and argument without quotes, case as written.
struct ToolCall {
  std::string name;
  std::string argument;
};

// What a tool answered: the text the model sees, and the integer when the
// answer is a number (the extraction rules use "results that are integers").
struct ToolResult {
  std::string text;
  std::optional<std::int64_t> number;

  bool is_integer() const { return number.has_value(); }
  static ToolResult of_integer(std::int64_t value);
  static ToolResult of_text(std::string text);
};

// A call together with its result, in the order the calls were made.
struct ExecutedCall {
  ToolCall call;
  ToolResult result;
};

class Toolbox {
 public:
  // redirects must be set for TaskKind::kRecursive and is ignored otherwise
  // (a recursive Toolbox without one answers LOOKUP from the plain table).
  Toolbox(TaskKind kind, ValueTable table, std::optional<RedirectMap> redirects);

  TaskKind kind() const { return kind_; }
  const ValueTable& table() const { return table_; }
  // The multi_step key of words()[i], empty if MD5 is unavailable.
  const std::string& key_at(std::size_t i) const;
  // Whether this kind offers the tool (canonical upper-case name).
  bool offers(const std::string& name) const;

  ToolResult execute(const ToolCall& call) const;

 private:
  ToolResult lookup(const std::string& word) const;
  ToolResult get_key(const std::string& word) const;
  ToolResult fetch(const std::string& key) const;

  TaskKind kind_;
  ValueTable table_;
  std::optional<RedirectMap> redirects_;
  std::vector<std::string> keys_;  // one per word, "" when MD5 failed
};

}  // namespace zorplex
