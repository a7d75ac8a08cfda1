#include "zorplex/tools.h"

#include <utility>

#include "zorplex/keys.h"
#include "zorplex/text_scan.h"

namespace zorplex {

ToolResult ToolResult::of_integer(std::int64_t value) {
  return ToolResult{std::to_string(value), value};
}

ToolResult ToolResult::of_text(std::string text) {
  return ToolResult{std::move(text), std::nullopt};
}

Toolbox::Toolbox(TaskKind kind, ValueTable table, std::optional<RedirectMap> redirects)
    : kind_(kind), table_(std::move(table)), redirects_(std::move(redirects)) {
  if (kind_ != TaskKind::kRecursive) redirects_.reset();
  keys_.reserve(words().size());
  for (const std::string& word : words()) {
    Result<std::string> key = make_key(word, table_.seed());
    keys_.push_back(key.ok() ? key.value() : std::string());
  }
}

const std::string& Toolbox::key_at(std::size_t i) const {
  return keys_[i];
}

bool Toolbox::offers(const std::string& name) const {
  if (kind_ == TaskKind::kMultiStep) return name == kGetKey || name == kFetch;
  return name == kLookup;
}

ToolResult Toolbox::execute(const ToolCall& call) const {
  const std::string name = ascii_upper(call.name);
  if (!offers(name)) return ToolResult::of_text(kUnknownTool);
  if (name == kLookup) return lookup(ascii_lower(call.argument));
  if (name == kGetKey) return get_key(ascii_lower(call.argument));
  return fetch(ascii_upper(call.argument));
}

ToolResult Toolbox::lookup(const std::string& word) const {
  if (redirects_) {
    const RedirectEntry* entry = redirects_->find(word);
    if (entry == nullptr) return ToolResult::of_text(kUnknown);
    if (entry->is_redirect) return ToolResult::of_text("SEE: " + entry->target);
    return ToolResult::of_integer(entry->value);
  }
  std::optional<int> value = table_.value_of(word);
  if (!value) return ToolResult::of_text(kUnknown);
  return ToolResult::of_integer(*value);
}

ToolResult Toolbox::get_key(const std::string& word) const {
  std::optional<std::size_t> i = word_index(word);
  if (!i) return ToolResult::of_text(kUnknownWord);
  if (keys_[*i].empty()) return ToolResult::of_text(kKeyUnavailable);
  return ToolResult::of_text(keys_[*i]);
}

ToolResult Toolbox::fetch(const std::string& key) const {
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (!keys_[i].empty() && keys_[i] == key) return ToolResult::of_integer(table_.value_at(i));
  }
  return ToolResult::of_text(kInvalidKey);
}

}  // namespace zorplex
